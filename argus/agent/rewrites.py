"""Rewrites: named, parameterised source-to-source transformations of the program at hand.

A planner asks for one by name with JSON arguments ({"op": "rewrite", "name": "persistent", "args":
{...}}); it never supplies code. Each rewrite either returns the rewritten program (source text and
param overrides) or raises `Inapplicable` with the reason, which goes back to the planner like a
verifier finding. This module holds the registry and the rewrites of params and launch options; the
structural ones (warp specialisation, TMA, persistent tile loops, grouped raster) derive their result
from the program's own statements (argus/agent/rewrites_struct.py). Rewrites only produce candidates:
correctness is established by the verifier and the referee, exactly as for a hand-written program.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from argus.agent.source import (
    SourceError,
    add_param,
    declared_params,
    find_launch,
    kernel_body,
    replace_line,
)


class Inapplicable(ValueError):
    """The rewrite does not apply to this program; the message says why (shown to the planner)."""


@dataclass(frozen=True)
class Program:
    source: str
    params: dict[str, object] = field(default_factory=dict)  # overrides of declared defaults
    template: str | None = None  # kept for old run records (stored programs are no longer swapped in)

    def effective(self) -> dict[str, object]:
        return {**declared_params(self.source), **self.params}


@dataclass(frozen=True)
class Env:
    """What a rewrite may consult besides the program: where the kernel came from."""

    path: str | None = None
    kernel: str | None = None


Rewrite = Callable[[Program, dict, Env], Program]
REWRITES: dict[str, Rewrite] = {}
DESCRIPTIONS: dict[str, str] = {}


def rewrite(name: str, doc: str):
    def deco(fn: Rewrite) -> Rewrite:
        REWRITES[name] = fn
        DESCRIPTIONS[name] = doc
        return fn
    return deco


def _param_used_by(src: str, keyword: str) -> str | None:
    """The param bound to `keyword=NAME` somewhere in the body (e.g. stages=STAGES), if any."""
    declared = declared_params(src)
    for m in re.finditer(rf"\b{keyword}[ \t]*=[ \t]*([A-Za-z_]\w*)", src):
        if m.group(1) in declared:
            return m.group(1)
    return None


def _with(p: Program, **params: object) -> Program:
    return Program(p.source, {**p.params, **params}, p.template)


def _valued(p: Program, env: Env, name: str) -> object:
    """A param's value in this program: its override, its literal default, or its default expression
    (`BKV = 128 if HD == 64 else 64`) evaluated as the compiler does, from the other params."""
    cur = p.effective()[name]
    if isinstance(cur, str):  # a string param or an expression: the built kernel has its value
        from argus.dsl.diagnostics import ArgusError
        from argus.ir.build import build_source
        try:
            return build_source(p.source, p.params, env.kernel, path="<rewrite>").param_dict.get(name, cur)
        except ArgusError:
            return cur
    return cur


def _scaled(cur: object, spec: object, name: str) -> int:
    if not isinstance(cur, int):
        raise Inapplicable(f"param {name} is {cur!r}, not an integer")
    if isinstance(spec, str) and spec[:1] in "*/" and spec[1:].isdigit():
        f = int(spec[1:])
        return cur * f if spec[0] == "*" else cur // f
    if isinstance(spec, int) and not isinstance(spec, bool):
        return spec
    raise Inapplicable(f"{name}: give an integer or '*2' / '/2', not {spec!r}")


@rewrite("mma_instr", "switch the MMA instruction: args {instr: 'wgmma' | 'mma.sync'}")
def mma_instr(p: Program, args: dict, env: Env) -> Program:
    instr = args.get("instr")
    if instr not in ("wgmma", "mma.sync"):
        raise Inapplicable("instr must be 'wgmma' or 'mma.sync'")
    eff = p.effective()
    name = _param_used_by(p.source, "instr")
    if name is None:
        name = next((n for n, v in eff.items() if v in ("wgmma", "mma.sync")), None)
    if name is not None:
        if eff[name] == instr:
            raise Inapplicable(f"{name} is already {instr!r}")
        return _with(p, **{name: instr})
    lits = re.findall(r'instr[ \t]*=[ \t]*"(mma\.sync|wgmma)"', p.source)
    if not lits or all(x == instr for x in lits):
        raise Inapplicable(f"no mma with another instruction than {instr!r}")
    src = re.sub(r'instr([ \t]*)=([ \t]*)"(mma\.sync|wgmma)"', rf'instr\1=\2"{instr}"', p.source)
    return Program(src, p.params, p.template)


@rewrite("stages", "pipeline depth: args {stages: int} or {delta: +1/-1}")
def stages(p: Program, args: dict, env: Env) -> Program:
    name = _param_used_by(p.source, "stages") or ("STAGES" if "STAGES" in declared_params(p.source) else None)
    if name is not None:
        cur = _valued(p, env, name)
        if not isinstance(cur, int):
            raise Inapplicable(f"{name} is not an integer")
        new = int(args["stages"]) if "stages" in args else cur + int(args.get("delta", 1))
        if not 1 <= new <= 8:
            raise Inapplicable(f"{name}={new} is outside 1..8")
        if new == cur:
            raise Inapplicable(f"{name} is already {cur}")
        return _with(p, **{name: new})
    m = re.search(r"stages[ \t]*=[ \t]*(\d+)", p.source)
    if not m:
        raise Inapplicable("no pipeline(…, stages=…) loop and no STAGES param")
    cur = int(m.group(1))
    new = int(args["stages"]) if "stages" in args else cur + int(args.get("delta", 1))
    if not 1 <= new <= 8 or new == cur:
        raise Inapplicable(f"stages={new} is not a change within 1..8")
    src = p.source[: m.start(1)] + str(new) + p.source[m.end(1):]
    return Program(src, p.params, p.template)


@rewrite("swizzle", "shared-memory swizzle: args {bytes: 0|32|64|128}")
def swizzle(p: Program, args: dict, env: Env) -> Program:
    b = args.get("bytes")
    if b not in (0, 32, 64, 128):
        raise Inapplicable("swizzle bytes must be 0, 32, 64 or 128")
    name = _param_used_by(p.source, "swizzle")
    if name is not None:
        if p.effective()[name] == b:
            raise Inapplicable(f"{name} is already {b}")
        return _with(p, **{name: b})
    lits = re.findall(r"swizzle[ \t]*=[ \t]*(\d+)", p.source)
    if not lits or all(int(x) == b for x in lits):
        raise Inapplicable(f"no shared buffer with a swizzle other than {b}")
    return Program(re.sub(r"swizzle([ \t]*)=([ \t]*)\d+", rf"swizzle\1=\g<2>{b}", p.source), p.params, p.template)


@rewrite("tile", "block tile sizes: args {BM|BN|BK: int | '*2' | '/2'}")
def tile(p: Program, args: dict, env: Env) -> Program:
    eff = p.effective()
    new: dict[str, object] = {}
    for name, spec in args.items():
        if name not in eff:
            raise Inapplicable(f"the kernel has no param {name}")
        cur = _valued(p, env, name)
        v = _scaled(cur, spec, name)
        if not 8 <= v <= 512:
            raise Inapplicable(f"{name}={v} is outside 8..512")
        if v != cur:
            new[name] = v
    if not new:
        raise Inapplicable("no tile size changes")
    return _with(p, **new)


def _code(src: str) -> str:
    """The source without comments (names in comments do not clash)."""
    return re.sub(r"#[^\n]*", "", src)


def _check_free(src: str, names: tuple[str, ...]) -> None:
    for n in names:
        if re.search(rf"\b{n}\b", _code(src)):
            raise Inapplicable(f"the kernel already uses the name {n!r}")


def linearize(src: str) -> str:
    """2-D grid (tiles along M, tiles along N) -> 1-D grid with an explicit tile index.

    Gives later rewrites (grouped order, persistent loop) one place to change: the lines mapping
    `tile` to (bm, bn).
    """
    if re.search(r"^[ \t]*tile[ \t]*=[ \t]*block_id\(0\)", src, re.M) or re.search(r"persistent\(", src):
        return src
    launch = find_launch(src)
    if len(launch.grid) != 2:
        return linearize_nd(src)
    lines = src.splitlines()
    rows = [i for i, ln in enumerate(lines) if re.match(r"^[ \t]*\w+[ \t]*=[ \t]*block_id\(0\)[ \t]*(#.*)?$", ln)]
    cols = [i for i, ln in enumerate(lines) if re.match(r"^[ \t]*\w+[ \t]*=[ \t]*block_id\(1\)[ \t]*(#.*)?$", ln)]
    if len(rows) != 1 or len(cols) != 1:
        raise Inapplicable("needs exactly one `x = block_id(0)` and one `y = block_id(1)` line")
    _check_free(src, ("tile", "tiles_m", "tiles_n"))
    bm = lines[rows[0]].split("=")[0].strip()
    bn = lines[cols[0]].split("=")[0].strip()
    ind = lines[rows[0]][: len(lines[rows[0]]) - len(lines[rows[0]].lstrip())]
    g0, g1 = launch.grid
    new_launch = type(launch)(launch.line, (f"{g0} * {g1}",), launch.rest, launch.indent)
    lines[launch.line] = new_launch.render()
    lines[rows[0]: rows[0] + 1] = [f"{ind}tiles_m = {g0}", f"{ind}tiles_n = {g1}", f"{ind}tile = block_id(0)",
                                   f"{ind}{bm} = tile // tiles_n", f"{ind}{bn} = tile % tiles_n"]
    del lines[cols[0] + (4 if cols[0] > rows[0] else 0)]
    return "\n".join(lines) + "\n"


def grid_subst(grid: tuple[str, ...], tile: str = "tile") -> dict[int, str]:
    """block_id(i) in terms of a linear tile index over `grid`, block_id(0) fastest (launch order kept)."""
    out = {}
    for i, g in enumerate(grid):
        below = " * ".join(f"({x})" for x in grid[:i])
        if i == len(grid) - 1:
            out[i] = f"({tile} // ({below}))" if below else tile
        else:
            out[i] = f"({tile} // ({below}) % ({g}))" if below else f"({tile} % ({g}))"
    return out


def substitute_blocks(text: str, subst: dict[int, str]) -> str:
    return re.sub(r"\bblock_id\(\s*(\d)\s*\)", lambda m: subst.get(int(m.group(1)), m.group(0)), text)


def linearize_nd(src: str) -> str:
    """An N-D grid (N != 2) -> a 1-D grid: `tile = block_id(0)` first, every block_id(i) after it an
    expression of tile (the launch order kept)."""
    launch = find_launch(src)
    if re.search(r"\bnum_blocks\(", _code(src)):
        raise Inapplicable("the kernel reads num_blocks(); linearising its grid would change it")
    _check_free(src, ("tile",))
    body = kernel_body(src)
    lines = src.splitlines()
    first = next(i for i in range(body.start, body.end) if lines[i].strip() and not lines[i].lstrip().startswith(
        ("#", "param ", "launch")))
    subst = grid_subst(launch.grid)
    for i in range(first, body.end):
        lines[i] = substitute_blocks(lines[i], subst)
    total = " * ".join(f"({g})" if not re.fullmatch(r"[\w()., ]+", g) else g for g in launch.grid)
    lines[launch.line] = type(launch)(launch.line, (total,), launch.rest, launch.indent).render()
    lines.insert(first, f"{body.indent}tile = block_id(0)")
    return "\n".join(lines) + "\n"


@rewrite("grouped_raster", "L2-friendly tile order: GROUP_M row-tiles advance together; args {group_m: int}")
def grouped_raster(p: Program, args: dict, env: Env) -> Program:
    g = int(args.get("group_m", 8))
    if not 1 <= g <= 64:
        raise Inapplicable("group_m must be in 1..64")
    if "GROUP_M" in declared_params(p.source):
        if p.effective()["GROUP_M"] == g:
            raise Inapplicable(f"GROUP_M is already {g}")
        return _with(p, GROUP_M=g)
    try:
        src = linearize(p.source)
    except SourceError as e:
        raise Inapplicable(str(e)) from e
    _check_free(src, ("group", "first_m", "group_rows"))
    lines = src.splitlines()
    rx_m = re.compile(r"^[ \t]*\w+[ \t]*=[ \t]*tile[ \t]*//[ \t]*tiles_n[ \t]*(#.*)?$")
    rx_n = re.compile(r"^[ \t]*\w+[ \t]*=[ \t]*tile[ \t]*%[ \t]*tiles_n[ \t]*(#.*)?$")
    pairs = [i for i in range(len(lines) - 1) if rx_m.match(lines[i]) and rx_n.match(lines[i + 1])]
    if not pairs:
        raise Inapplicable("cannot find the tile -> (row, col) mapping lines")
    for i in reversed(pairs):  # one mapping per role of a persistent warp-specialised kernel
        bm, bn = lines[i].split("=")[0].strip(), lines[i + 1].split("=")[0].strip()
        ind = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
        lines[i: i + 2] = [
            f"{ind}group = tile // (GROUP_M * tiles_n)          # GROUP_M row-tiles share their B panels in L2",
            f"{ind}first_m = group * GROUP_M",
            f"{ind}group_rows = min(tiles_m - first_m, GROUP_M)",
            f"{ind}{bm} = first_m + (tile % (GROUP_M * tiles_n)) % group_rows",
            f"{ind}{bn} = (tile % (GROUP_M * tiles_n)) // group_rows",
        ]
    src = add_param("\n".join(lines) + "\n", "GROUP_M", g)
    return Program(src, p.params, p.template)


@rewrite("persistent", "persistent tile loop: a grid of NUM_SMS blocks strides over all tiles; args {num_sms}")
def persistent(p: Program, args: dict, env: Env) -> Program:
    n = int(args.get("num_sms", 132))
    if re.search(r"persistent\(", p.source):
        if "NUM_SMS" in declared_params(p.source) and p.effective()["NUM_SMS"] != n:
            return _with(p, NUM_SMS=n)
        raise Inapplicable("the tile loop is already persistent")
    if re.search(r"\brole[ \t]*\(", _code(p.source)):
        from argus.agent.rewrites_struct import persistent_roles

        return persistent_roles(p, n, env)
    try:
        src = linearize(p.source)
        launch = find_launch(src)
        body = kernel_body(src)
    except SourceError as e:
        raise Inapplicable(str(e)) from e
    if len(launch.grid) != 1:
        raise Inapplicable("needs a 1-D grid of tiles")
    lines = src.splitlines()
    t = next((i for i, ln in enumerate(lines) if re.match(r"^[ \t]*tile[ \t]*=[ \t]*block_id\(0\)", ln)), None)
    if t is None:
        raise Inapplicable("no `tile = block_id(0)` line")
    ind, step = body.indent, "    "
    allocs, rest = [], []
    for ln in lines[t + 1: body.end]:
        top = ln.startswith(ind) and not ln[len(ind):].startswith((" ", "\t"))
        (allocs if top and re.search(r"=[ \t]*(shared|mbarrier)\(", ln) else rest).append(ln)
    total = launch.grid[0]
    loop = [f"{ind}for tile in persistent({total}):"]
    loop += [(step + ln) if ln.strip() else ln for ln in rest]
    # The next tile's prologue refills pipeline stages that slower threads may still be reading.
    loop.append(f"{ind}{step}barrier()")
    new_launch = type(launch)(launch.line, (f"min(NUM_SMS, {total})",), launch.rest, launch.indent)
    lines[launch.line] = new_launch.render()
    lines[t: body.end] = allocs + loop
    src = add_param("\n".join(lines) + "\n", "NUM_SMS", n)
    return Program(src, p.params, p.template)


@rewrite("cluster", "thread-block cluster shape: args {shape: [x, y]}")
def cluster(p: Program, args: dict, env: Env) -> Program:
    shape = tuple(int(x) for x in args.get("shape", (2, 1)))
    try:
        launch = find_launch(p.source)
    except SourceError as e:
        raise Inapplicable(str(e)) from e
    val = "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"
    rest = dict(launch.rest)
    if rest.get("cluster", "").replace(" ", "") == val.replace(" ", ""):
        raise Inapplicable(f"cluster is already {val}")
    rest["cluster"] = val
    new = type(launch)(launch.line, launch.grid, tuple(rest.items()), launch.indent)
    return Program(replace_line(p.source, launch.line, new.render()), p.params, p.template)


@rewrite("role_registers", "setmaxnreg per role: args {producer: int, consumer: int} (multiples of 8, 24..256)")
def role_registers(p: Program, args: dict, env: Env) -> Program:
    if not re.search(r"\brole[ \t]*\(", p.source):
        raise Inapplicable("no producer/consumer roles (warp-specialise first)")
    new = {}
    for role, pname in (("producer", "PRODUCER_REGS"), ("consumer", "CONSUMER_REGS")):
        if role not in args:
            continue
        r = int(args[role])
        if r % 8 or not 24 <= r <= 256:
            raise Inapplicable(f"{role} registers {r}: setmaxnreg takes multiples of 8 in 24..256")
        new[role, pname] = r
    eff = p.effective()
    src = p.source
    params = dict(p.params)
    for (role, pname), r in new.items():
        if pname in eff:
            params[pname] = r
            continue
        src = _set_role_option(src, role, "registers", str(r))
    if src == p.source and params == p.params:
        raise Inapplicable("registers unchanged")
    return Program(src, params, p.template)


@rewrite("release", "when a ring consumer hands a stage back: args {mode: 'deferred' | 'immediate'} (deferred "
         "keeps one step's wgmmas in flight; immediate gives the producer one more stage of prefetch)")
def release(p: Program, args: dict, env: Env) -> Program:
    mode = args.get("mode", "immediate")
    if mode not in ("deferred", "immediate"):
        raise Inapplicable(f"release mode {mode!r}: 'deferred' or 'immediate'")
    eff = p.effective()
    if "RELEASE" in eff:
        if eff["RELEASE"] == mode:
            raise Inapplicable(f"release is already {mode}")
        return _with(p, RELEASE=mode)
    call = re.search(r'role\([ \t]*"consumer"[^)\n]*\)', p.source)
    if call is None:
        raise Inapplicable("no consumer role (warp-specialise first)")
    old = re.search(r'\brelease[ \t]*=[ \t]*"(\w+)"', call.group(0))
    if (old.group(1) if old else "deferred") == mode:
        raise Inapplicable(f"release is already {mode}")
    return Program(_set_role_option(p.source, "consumer", "release", f'"{mode}"'), p.params, p.template)


def _set_role_option(src: str, role: str, name: str, value: str) -> str:
    """`name=value` in the first `role("<role>", ...)` call: replaced where it stands (other options may
    follow it), else appended."""
    call = re.search(rf'role\([ \t]*"{role}"[^)\n]*\)', src)
    if call is None:
        raise Inapplicable(f"no {role} role")
    text = call.group(0)
    opt = re.compile(rf'\b{name}[ \t]*=[ \t]*("\w*"|\w+)')
    text = opt.sub(f"{name}={value}", text, count=1) if opt.search(text) else text[:-1] + f", {name}={value})"
    return src[:call.start()] + text + src[call.end():]


@rewrite("warpgroups", "MMA warpgroups per block: args {consumers: int | '*2' | '/2'} (the CONSUMERS param of a "
         "warp-specialised kernel, or threads= of a plain one)")
def warpgroups(p: Program, args: dict, env: Env) -> Program:
    eff = p.effective()
    spec = args.get("consumers", "*2")
    if "CONSUMERS" in eff:
        v = _scaled(eff["CONSUMERS"], spec, "CONSUMERS")
        if not 1 <= v <= 4 or v == eff["CONSUMERS"]:
            raise Inapplicable(f"CONSUMERS={v} is not a change within 1..4")
        return _with(p, CONSUMERS=v)
    try:
        launch = find_launch(p.source)
    except SourceError as e:
        raise Inapplicable(str(e)) from e
    rest = dict(launch.rest)
    cur = rest.get("threads", "")
    if not cur.isdigit() or int(cur) % 128:
        raise Inapplicable("no CONSUMERS param and no literal threads= in whole warpgroups to change")
    v = _scaled(int(cur) // 128, spec, "warpgroups")
    if not 1 <= v <= 4 or v * 128 == int(cur):
        raise Inapplicable(f"{v} warpgroups is not a change within 1..4")
    rest["threads"] = str(128 * v)
    new = type(launch)(launch.line, launch.grid, tuple(rest.items()), launch.indent)
    return Program(replace_line(p.source, launch.line, new.render()), p.params, p.template)


@rewrite("split_k", "split the K loop over blocks: args {splits: int}")
def split_k(p: Program, args: dict, env: Env) -> Program:
    # Each split produces a partial sum of the same output tile. The language has both ways to combine
    # them (atomic_add into an f32 output; an f32 workspace and a reduction kernel in a `layer`, as
    # gemm_ws.arg's gemm_ws_splitk), but the first changes the output's contract (it must start zeroed)
    # and the second turns the kernel into two, and the tune loop rewrites and times one kernel.
    raise Inapplicable("split-K turns the kernel into a layer (partial products into an f32 workspace, then "
                       "a reduction kernel: gemm_ws.arg's gemm_ws_splitk) or needs a zeroed output for "
                       "atomic_add; the tune loop rewrites one kernel, so it is not offered. For few output "
                       "tiles prefer smaller BM / BN.")


def apply_rewrite(name: str, p: Program, args: dict, env: Env) -> Program:
    fn = REWRITES.get(name)
    if fn is None:
        raise Inapplicable(f"unknown rewrite {name!r}; known: {', '.join(sorted(REWRITES))}")
    return fn(p, dict(args or {}), env)


from argus.agent import rewrites_struct  # noqa: E402,F401  (registers the structural rewrites)
