"""Structural rewrites derived from the program at hand: warp specialisation, TMA copies, persistent loops.

Each reads the kernel's own statements (argus/agent/structure.py, with the lowered IR telling scalars
from tiles) and writes a new program; none swaps in a stored one. What each needs, and refuses
(`Inapplicable`, with the reason) otherwise:

* warp_specialise: one top-level `for k in pipeline(n, stages=S)` whose body is index lets, the step's
  `copy_async`s into ring buffers `buf[s]` (`s = k % S`), one `wait_async`, then the math. It becomes
  a producer warpgroup that issues TMA copies (`copy_bulk`) into the ring, each stage completed on a
  `full` mbarrier (`expect_tx` of the stage's bytes), and consumer warpgroups (as many as the block
  had) that wait on `full`, do the math and hand the stage back on `empty`. A ring shallower than 3
  stages is deepened (to at most 4, within 200 KB of shared memory): a one-stage ring would make the
  producer and the consumers take turns. Tile values set up before
  the loop and everything after it move into the consumer role; scalars, allocations and assumes stay
  outside the roles. TMA needs 16-byte row pitches: the runtime re-pitches tensors the kernel only reads;
  a copied tensor the kernel also writes must have a last dim that is a multiple of 16 bytes under the
  kernel's own assumes, else the rewrite refuses — adding the assume would narrow the problem, which the
  referee rejects anyway.
* tma: a one-shot `copy_async` outside any loop (attention's Q tile) with its `wait_async` becomes an
  mbarrier-completed `copy_bulk` and a `wait` (same 16-byte condition).
* persistent: a grid of NUM_SMS blocks walks all tiles. Without roles the whole body moves into
  `for tile in persistent(total)` (allocations stay outside, a barrier ends each tile). With roles,
  each role gets its own tile loop; block-dependent scalars are recomputed per tile, and the ring
  position runs on across tiles (`step0 + k`), so the producer prefetches the next tile's first stages
  while the consumers finish the current one. That needs the same trip count for every tile and no
  assume over per-tile values (assumes may not sit inside roles).
* grouped_raster: GROUP_M row tiles advance together so they share their column panels in L2 (a 2-D
  grid of tiles, in every role of a persistent kernel).

Every result is verified and tested like any other candidate.
"""

from __future__ import annotations

import re

import z3

from argus.agent.rewrites import Env, Inapplicable, Program, _check_free, _code, rewrite
from argus.agent.source import SourceError, add_param, find_launch, kernel_body, split_top
from argus.agent.structure import (
    DTYPE_BYTES,
    Stmt,
    assigned,
    call_args,
    indexed,
    reindent,
    shared_decl,
    statements,
)

STEP = "    "


def _ir(p: Program, env: Env):
    from argus.dsl.diagnostics import ArgusError
    from argus.ir.build import build_source

    try:
        return build_source(p.source, p.params, env.kernel, path="<rewrite>")
    except ArgusError as e:
        raise Inapplicable(f"the program does not build: {e.diagnostics[0].message}") from None


def _scalar_lets(kernel) -> dict[str, bool]:
    """Top-level (and role-level) lets of the lowered kernel: name -> binds a tile."""
    from argus.dsl.types import TileT
    from argus.ir import nodes as ir

    out: dict[str, bool] = {}

    def go(stmts) -> None:
        for s in stmts:
            if isinstance(s, ir.Let):
                out[s.name] = out.get(s.name, False) or isinstance(s.value.type, TileT)
            elif isinstance(s, ir.Role):
                go(s.body)
    go(kernel.body)
    return out


def _aligned(kernel, tensor: str, box_last: int | None) -> str | None:
    """Why a TMA copy of `tensor` is not addressable (None: it is): its row pitch must be a multiple of
    16 bytes under the kernel's assumes, and so must the box's innermost extent."""
    from argus.agent.problem import space_for

    t = kernel.tensor(tensor)
    q = max(1, 16 // t.dtype.bytes)
    if box_last is not None and (box_last * t.dtype.bytes) % 16:
        return f"a TMA box row of {box_last} {t.dtype} elements is not a multiple of 16 bytes"
    if tensor in kernel.inputs and tensor not in kernel.outputs:
        return None  # read-only: the runtime re-pitches its rows (argus/analysis/checks/alignment.py)
    last = t.dims[-1]
    if isinstance(last, int):
        return None if last % q == 0 else f"{tensor}'s rows ({last} elements) are not a multiple of 16 bytes"
    space = space_for(kernel)
    s = z3.Solver()
    s.set("timeout", 2000)
    s.add(*space.constraints, *(v >= 1 for v in space.vars.values()), space.vars[last] % q != 0)
    if s.check() == z3.unsat:
        return None
    return (f"the kernel accepts {last} not a multiple of {q}, and TMA needs 16-byte row pitches in {tensor}; "
            f"a start kernel that states assume({last} % {q} == 0) (if the problem allows it) can use TMA")


def _outline(src: str):
    """(kernel body, launch, source lines, top-level statements) of a program; Inapplicable if unreadable."""
    try:
        body = kernel_body(src)
        launch = find_launch(src)
        lines = src.splitlines()
        return body, launch, lines, statements(lines, body.start, body.end, body.indent)
    except SourceError as e:
        raise Inapplicable(str(e)) from e


def _bytes(decl: tuple[str, str, list[str]], ring: bool) -> str:
    _, dtype, dims = decl
    dims = dims[1:] if ring else dims
    return " * ".join([*(f"({d})" if not re.fullmatch(r"\w+", d) else d for d in dims),
                       str(DTYPE_BYTES.get(dtype, 2))])


def _free_names(src: str, *options: tuple[str, ...]) -> tuple[str, ...]:
    for names in options:
        if not any(re.search(rf"\b{n}\b", _code(src)) for n in names):
            return names
    raise Inapplicable(f"the names {', '.join(options[0])} are taken")


@rewrite("warp_specialise", "split the pipelined loop into a TMA producer warpgroup and consumer warpgroups "
         "over an mbarrier ring (derived from this program); args {registers: [producer, consumer]} optional")
def warp_specialise(p: Program, args: dict, env: Env) -> Program:
    src = p.source
    if re.search(r"\brole[ \t]*\(", _code(src)):
        raise Inapplicable("the kernel is already warp-specialised")
    body, launch, lines, top = _outline(src)
    k = _ir(p, env)
    tiles = _scalar_lets(k)
    loops = [s for s in top if re.match(r"^for\s+\w+\s+in\s+pipeline\s*\(", s.code(lines))]
    if len(loops) != 1:
        raise Inapplicable(f"needs exactly one top-level `for k in pipeline(n, stages=S)` loop, found {len(loops)}")
    loop = loops[0]
    m = re.match(r"^for\s+(\w+)\s+in\s+pipeline\s*\((.*)\)\s*:\s*$", loop.code(lines))
    var, pargs = m.group(1), split_top(m.group(2))
    count = pargs[0]
    inner = statements(lines, loop.head + 1, loop.hi)
    if not inner:
        raise Inapplicable("the pipelined loop is empty")
    inner_indent = lines[inner[0].head][: len(lines[inner[0].head]) - len(lines[inner[0].head].lstrip())]
    codes = [s.code(lines) for s in inner]
    first_copy = next((i for i, c in enumerate(codes) if c.startswith("copy_async")), None)
    wait_at = next((i for i, c in enumerate(codes) if c.startswith("wait_async")), None)
    if first_copy is None or wait_at is None or wait_at < first_copy:
        raise Inapplicable("the pipelined loop has no copy_async ... wait_async step to hand to a producer")
    pre, copies, rest = inner[:first_copy], inner[first_copy:wait_at], inner[wait_at + 1:]
    if any(assigned(c) is None for c in codes[:first_copy]):
        raise Inapplicable("the loop computes more than indices before its copies")
    if any(c.startswith(("copy_async", "wait_async", "commit")) for c in codes[wait_at + 1:]):
        raise Inapplicable("the loop copies after its wait (a hand-written prefetch); not a one-step body")
    decls = {d[0]: d for d in (shared_decl(s.code(lines)) for s in top) if d}
    slot = None
    copy_lines: list[tuple[str, str, str]] = []  # (dst, src, buffer)
    expect = []
    for c in (s.code(lines) for s in copies):
        got = call_args(c, "copy_async")
        if got is None or len(got[0]) != 2:
            raise Inapplicable(f"cannot read the copy `{c}`")
        dst, srcref = got[0]
        buf, idx = indexed(dst)
        if buf not in decls:
            raise Inapplicable(f"the copy's destination {buf} is not a shared buffer of this kernel")
        if slot is not None and idx != slot:
            raise Inapplicable("the copies of one step use different ring slots")
        slot = idx
        tensor = re.match(r"^(\w+)", srcref).group(1)
        alloc = next(a for a in _allocs(k) if a.name == buf)
        why = _aligned(k, tensor, alloc.shape[-1])
        if why:
            raise Inapplicable(why)
        copy_lines.append((dst, srcref, buf))
        expect.append(_bytes(decls[buf], idx is not None))
    ring = "1"
    if slot is not None:
        let = next((s.code(lines) for s in pre if assigned(s.code(lines)) == slot), None)
        mm = re.match(rf"^{slot}\s*=\s*{var}\s*%\s*(\w+)\s*$", let or "")
        if mm is None:
            raise Inapplicable(f"the ring slot {slot} is not `{slot} = {var} % STAGES`")
        ring = mm.group(1)
    slot_txt = slot if slot is not None else "0"
    full, empty = _free_names(src, ("full", "empty"), ("ring_full", "ring_empty"))

    threads = k.threads
    if threads % 128:
        raise Inapplicable(f"{threads} threads are not whole warpgroups (128 threads each)")
    rest_kw = dict(launch.rest)
    cons_txt = rest_kw.get("warpgroups")
    params_txt = ""
    if cons_txt is None:
        mt = re.fullmatch(r"128\s*\*\s*(\w+)", rest_kw.get("threads", ""))
        if mt:
            cons_txt = mt.group(1)
        else:
            _check_free(src, ("CONSUMERS",))
            cons_txt, params_txt = "CONSUMERS", "CONSUMERS"
    n_cons = threads // 128
    regs = args.get("registers")
    prod_regs, cons_regs = (int(regs[0]), int(regs[1])) if regs else \
        (40 if n_cons <= 2 else 24, min(232, (65536 - 128 * (40 if n_cons <= 2 else 24)) // (128 * n_cons) // 8 * 8))

    outside: list[str] = []
    cons_pre: list[str] = []
    cons_post: list[str] = []
    allocs_end = 0
    for s in top:
        c = s.code(lines)
        block = s.lines(lines)
        if s is loop:
            continue
        if c.startswith(("param ", "launch")):
            continue
        is_alloc = re.match(r"^\w+\s*=\s*(shared|mbarrier)\s*\(", c) is not None
        name = assigned(c)
        if s.head > loop.head:
            cons_post += block
        elif is_alloc or c.startswith("assume") or (name is not None and not tiles.get(name, False)):
            outside += block
            if is_alloc:
                allocs_end = len(outside)
        else:
            cons_pre += block
    ind = body.indent
    ring_decl = [f"{ind}{full} = mbarrier(count=1, n={ring})     # stage filled: the producer's expect_tx + TMA bytes",
                 f"{ind}{empty} = mbarrier(count=1, n={ring})    # stage free: the consumers are done with it"]
    outside[allocs_end:allocs_end] = ring_decl
    i1, i2 = ind + STEP, ind + STEP * 2
    pre_txt = [ln for s in pre for ln in s.lines(lines)]
    prod = [f'{ind}with role("producer", warpgroups=1, registers={prod_regs}):',
            f"{i1}for {var} in range({count}):", *reindent(pre_txt, inner_indent, i2),
            f"{i2}wait({empty}[{slot_txt}], ({var} // {ring} + 1) % 2)    # a fresh barrier passes parity 1",
            f"{i2}expect_tx({full}[{slot_txt}], {' + '.join(expect)})",
            *(f"{i2}copy_bulk({d}, {s_}, barrier={full}[{slot_txt}])" for d, s_, _ in copy_lines)]
    rest_txt = [ln for s in rest for ln in s.lines(lines)]
    cons = [f'{ind}with role("consumer", warpgroups={cons_txt}, registers={cons_regs}):',
            *reindent(cons_pre, ind, i1),
            f"{i1}for {var} in range({count}):", *reindent(pre_txt, inner_indent, i2),
            f"{i2}wait({full}[{slot_txt}], {var} // {ring} % 2)", *reindent(rest_txt, inner_indent, i2),
            f"{i2}arrive({empty}[{slot_txt}])", *reindent(cons_post, ind, i1)]
    rest_kw.pop("threads", None)
    rest_kw["warpgroups"] = f"{cons_txt} + 1"
    new_launch = type(launch)(launch.line, launch.grid, tuple(rest_kw.items()), launch.indent)
    head = lines[: body.start]
    params_launch = [ln for s in top for ln in s.lines(lines) if s.code(lines).startswith(("param ", "launch"))]
    params_launch = [new_launch.render() if ln.strip().startswith("launch") else ln for ln in params_launch]
    out = head + params_launch + outside + prod + cons + lines[body.end:]
    text = "\n".join(out) + "\n"
    if params_txt:
        text = add_param(text, "CONSUMERS", n_cons)
    return Program(text, {**p.params, **_deeper_ring(p, ring, k, {b for _, _, b in copy_lines})}, p.template)


RING_SMEM = 200 * 1024  # shared memory a deepened ring may take (of 227 KB per block on sm_90)
RING_DEPTH = 4  # the producer runs this many stages ahead at most


def _deeper_ring(p: Program, ring: str, k, ring_bufs: set[str]) -> dict[str, int]:
    """A producer only overlaps the math when it can run ahead: a ring param (STAGES) below 3 is raised to
    the deepest of 3..RING_DEPTH whose buffers still fit RING_SMEM (none if even 3 does not fit)."""
    cur = p.effective().get(ring)
    if not isinstance(cur, int) or cur >= 3:
        return {}
    ring_bytes = other = 0
    for a in _allocs(k):
        n = DTYPE_BYTES.get(a.dtype.name, 4) if a.dtype is not None else 4
        for d in a.shape:
            n *= d
        if a.name in ring_bufs:
            ring_bytes += n
        else:
            other += n
    per_stage = ring_bytes / cur
    fits = [d for d in range(3, RING_DEPTH + 1) if other + d * per_stage <= RING_SMEM]
    return {ring: fits[-1]} if fits else {}


def _waited(code: str) -> list[str]:
    got = call_args(code, "wait_async")
    return got[0] if got else []


def _allocs(kernel):
    from argus.ir import nodes as ir
    from argus.ir.transform import walk

    return [s for s in walk(kernel.body) if isinstance(s, ir.AllocShared)]


@rewrite("tma", "turn a one-shot copy_async outside loops (e.g. attention's Q tile) into an mbarrier-completed "
         "TMA copy_bulk; args {}")
def tma(p: Program, args: dict, env: Env) -> Program:
    src = p.source
    if re.search(r"persistent\s*\(", _code(src)):
        raise Inapplicable("a one-shot TMA load inside a persistent tile loop would need a phase per tile")
    body, _launch, lines, top = _outline(src)
    scopes = [top]
    for s in top:  # one level into roles: their straight-line statements run once per block too
        if re.match(r"^with\s+role\s*\(", s.code(lines)):
            scopes.append(statements(lines, s.head + 1, s.hi))
    k = _ir(p, env)
    for scope in scopes:
        codes = [s.code(lines) for s in scope]
        for i, c in enumerate(codes):
            got = call_args(c, "copy_async")
            if got is None or len(got[0]) != 2:
                continue
            dst, srcref = got[0]
            buf, _ = indexed(dst)
            w = next((j for j in range(i + 1, len(codes)) if buf in [indexed(x)[0] for x in _waited(codes[j])]), None)
            if w is None or _waited(codes[w]) != [dst]:
                continue  # no wait, or one wait for several buffers: left alone
            tensor = re.match(r"^(\w+)", srcref).group(1)
            alloc = next((a for a in _allocs(k) if a.name == buf), None)
            if alloc is None:
                continue
            why = _aligned(k, tensor, alloc.shape[-1])
            if why:
                raise Inapplicable(why)
            (bar,) = _free_names(src, (f"{buf}_full",), (f"{buf}_tma",))
            decl = next(shared_decl(x.code(lines)) for x in top if (shared_decl(x.code(lines)) or ("",))[0] == buf)
            ind = lines[scope[i].head][: len(lines[scope[i].head]) - len(lines[scope[i].head].lstrip())]
            nbytes = _bytes(decl, dst != buf)
            out = list(lines)
            out[scope[w].lo: scope[w].hi] = [f"{ind}wait({bar}, 0)"]
            out[scope[i].lo: scope[i].hi] = [f"{ind}expect_tx({bar}, {nbytes})",
                                             f"{ind}copy_bulk({dst}, {srcref}, barrier={bar})"]
            alloc_stmt = next(x for x in top if (shared_decl(x.code(lines)) or ("",))[0] == buf)
            out.insert(alloc_stmt.hi, f"{body.indent}{bar} = mbarrier(count=1)    # completed by {buf}'s TMA bytes")
            return Program("\n".join(out) + "\n", p.params, p.template)
    raise Inapplicable("no one-shot copy_async ... wait_async outside a loop")


def _block_dependent(kernel) -> set[str]:
    """Names of lets whose value depends on the block (block ids, or lets that do), transitively."""
    from argus.ir import nodes as ir
    from argus.ir.transform import walk

    dep: set[str] = set()
    for s in walk(kernel.body):
        if isinstance(s, ir.Let) and any((isinstance(x, ir.Special) and x.kind in ("block_id", "num_blocks"))
                                         or (isinstance(x, ir.Var) and x.name in dep) for x in walk(s.value)):
            dep.add(s.name)
    return dep


def _names(code: str) -> set[str]:
    return set(re.findall(r"\b[A-Za-z_]\w*\b", re.sub(r"\"[^\"]*\"", "", code)))


def persistent_roles(p: Program, n: int, env: Env) -> Program:
    """`persistent` for a warp-specialised kernel (see the module docstring)."""
    from argus.agent.rewrites import grid_subst, substitute_blocks

    src = p.source
    if re.search(r"\bnum_blocks\(", _code(src)):
        raise Inapplicable("the kernel reads num_blocks(); a persistent grid would change it")
    _check_free(src, ("tile", "step0", "NUM_SMS"))
    body, launch, lines, top = _outline(src)
    k = _ir(p, env)
    dep = _block_dependent(k)
    roles = [s for s in top if re.match(r"^with\s+role\s*\(", s.code(lines))]
    moved: list[Stmt] = []
    text_dep = set(dep)  # what moves: block-dependent lets and lets that mention them (even in a dead branch)
    for s in top:
        c = s.code(lines)
        if s in roles or c.startswith(("param ", "launch")):
            continue
        if assigned(c) is not None and (assigned(c) in dep or _names(c.split("=", 1)[1]) & text_dep):
            moved.append(s)
            text_dep.add(assigned(c))
        elif _names(c) & text_dep:
            raise Inapplicable(f"`{c[:60]}` reads per-tile values outside the roles (an assume may not sit inside "
                               "a role), so the tile loop cannot enclose it")
    grid = launch.grid
    two_d = len(grid) == 2
    plain = {}  # `x = block_id(i)` lets, written as the row/col mapping grouped_raster knows
    if two_d:
        for s in moved:
            mm = re.match(r"^(\w+)\s*=\s*block_id\(\s*([01])\s*\)$", s.code(lines))
            if mm:
                plain[int(mm.group(2))] = mm.group(1)
    if two_d and len(plain) == 2:
        _check_free(src, ("tiles_m", "tiles_n"))
        total = "tiles_m * tiles_n"
        mapping = [f"{plain[0]} = tile // tiles_n", f"{plain[1]} = tile % tiles_n"]
        outside_new = [f"{body.indent}tiles_m = {grid[0]}", f"{body.indent}tiles_n = {grid[1]}"]
        subst = {0: f"({plain[0]})", 1: f"({plain[1]})"}
    else:
        total = " * ".join(f"({g})" for g in grid) if len(grid) > 1 else grid[0]
        mapping, outside_new, subst = [], [], grid_subst(grid)
    per_tile = [substitute_blocks(s.code(lines), subst) for s in moved
                if not (plain and re.match(r"^\w+\s*=\s*block_id\(", s.code(lines)))]
    out = lines[: body.start]
    for s in top:
        if s in moved:
            continue
        if s not in roles:
            out += s.lines(lines)
            if s.code(lines).startswith("launch"):
                launched = " * ".join(f"({g})" if "," in g or " " in g else g for g in grid)
                out[-1] = type(launch)(launch.line, (f"min({launched}, NUM_SMS)",), launch.rest,
                                       launch.indent).render()
            continue
        if outside_new:
            out += outside_new
            outside_new = []
        role_lines = s.lines(lines)
        head = s.head - s.lo
        inner = statements(lines, s.head + 1, s.hi)
        i1 = lines[inner[0].head][: len(lines[inner[0].head]) - len(lines[inner[0].head].lstrip())]
        loops = [x for x in inner if re.match(r"^for\s+\w+\s+in\s+range\s*\(", x.code(lines))]
        if len(loops) != 1:
            raise Inapplicable("each role needs exactly one top-level `for k in range(n)` ring loop")
        mm = re.match(r"^for\s+(\w+)\s+in\s+range\s*\((.*)\)\s*:$", loops[0].code(lines))
        var, count = mm.group(1), mm.group(2)
        if _names(count) & dep:
            raise Inapplicable(f"the ring loop's trip count `{count}` differs between tiles (e.g. causal "
                               "attention); the ring position across tiles would need a running sum")
        body_lines = lines[s.head + 1: s.hi]
        ring = []
        for ln in body_lines:
            c = ln.strip()
            if re.match(rf"^\w+\s*=\s*{var}\s*%\s*\w+", c) or c.startswith("wait("):
                ln = re.sub(rf"\b{var}\s*(%|//)", rf"(step0 + {var}) \1", ln)
            ring.append(ln)
        i2 = i1 + STEP
        out += role_lines[: head + 1]
        out += [f"{i1}for tile in persistent({total}):"]
        out += [f"{i2}{x}" for x in mapping + per_tile]
        out += [f"{i2}step0 = (tile - block_id(0)) // num_blocks(0) * ({count})    # ring position of this "
                "tile's first step"]
        out += reindent(ring, i1, i2)
        if any(re.match(r"^\s*copy_async\(", ln) for ln in body_lines):
            # the role's own one-shot copies (attention's Q tile) refill buffers that slower threads of the
            # role may still read from the tile before
            out.append(f"{i2}barrier()")
    out += lines[body.end:]
    text = add_param("\n".join(out) + "\n", "NUM_SMS", n)
    return Program(text, p.params, p.template)
