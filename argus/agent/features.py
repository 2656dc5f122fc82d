"""What the cost model and the profile advice need to know about a lowered kernel at given dims.

Read from the IR (not from param names), so rewrites and hand-written programs are judged by what
they do: tile shapes and instruction from the `mma`s, the ring depth from the shared buffers, warp
specialisation from roles, the persistent loop, and the order in which tiles are visited (evaluated
for the first wave, to estimate L2 reuse).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from argus.dsl.types import TileT
from argus.ir import nodes as ir


class Unknown(Exception):
    """A scalar that depends on something not known here (a loop variable, a thread index)."""


def ev(e: ir.Expr | None, env: dict[str, int]) -> int | float | bool:
    """Evaluate a scalar index expression; raises Unknown when it is not determined by env."""
    if e is None:
        raise Unknown("none")
    if isinstance(e, ir.Const):
        if e.value is None:
            raise Unknown("None")
        return e.value
    if isinstance(e, ir.Var):
        if e.name in env:
            return env[e.name]
        raise Unknown(e.name)
    if isinstance(e, ir.Special):
        key = f"{e.kind}({e.axis})" if e.kind in ("block_id", "num_blocks") else e.kind
        if key in env:
            return env[key]
        raise Unknown(key)
    if isinstance(e, ir.Bin):
        a, b = ev(e.a, env), ev(e.b, env)
        op = e.op
        if op in ("//", "%") and b == 0:
            raise Unknown("division by zero")
        return {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "//": lambda: a // b,
                "%": lambda: a % b, "/": lambda: a / b, "<<": lambda: a << b, ">>": lambda: a >> b,
                "&": lambda: a & b, "|": lambda: a | b, "^": lambda: a ^ b, "**": lambda: a ** b}[op]()
    if isinstance(e, ir.Un):
        a = ev(e.a, env)
        return -a if e.op == "-" else (~a if e.op == "~" else not a)
    if isinstance(e, ir.Cmp):
        a, b = ev(e.a, env), ev(e.b, env)
        return {"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b,
                "and": bool(a) and bool(b), "or": bool(a) or bool(b)}[e.op]
    if isinstance(e, ir.Select):
        return ev(e.a, env) if ev(e.cond, env) else ev(e.b, env)
    if isinstance(e, ir.Math) and e.fn in ("cdiv", "min", "max"):
        args = [ev(a, env) for a in e.args]
        if e.fn == "cdiv":
            return -(-args[0] // args[1])
        return min(args) if e.fn == "min" else max(args)
    raise Unknown(type(e).__name__)


@dataclass(frozen=True)
class MmaSite:
    instr: str
    m: int
    n: int
    k: int
    warps_m: int
    warps_n: int
    inst_n: int
    role: str | None  # the role running it, when warp-specialised


@dataclass(frozen=True)
class Features:
    kernel: str
    dims: tuple[tuple[str, int], ...]
    threads: int
    grid: tuple[int, ...]
    blocks: int
    cluster: tuple[int, ...]
    smem_bytes: int
    ring_depth: int  # stages of the operand ring (1: single buffer)
    swizzle: int  # smallest swizzle of an MMA operand buffer
    operand_row_bytes: tuple[int, ...]  # contiguous row bytes of each MMA operand buffer
    copy_mode: str  # "async" | "bulk" | "sync" | "none"
    mma: tuple[MmaSite, ...]
    warp_specialised: bool
    producer_warpgroups: int
    consumer_warpgroups: int
    producer_regs: int | None
    consumer_regs: int | None
    persistent: bool
    tiles: int  # output tiles processed in total
    ksteps: int  # mma executions per tile (main site)
    copy_bytes_per_tile: int  # global -> shared bytes one tile loads
    panel_bytes: tuple[tuple[str, int], ...]  # the same per input tensor (one operand panel)
    store_bytes_per_tile: int
    env: tuple[tuple[str, int], ...]  # dims, params and top-level scalars evaluated (for wave simulation)
    mma_flops_per_tile: float = 0.0  # every mma of a tile (all sites), averaged over sampled blocks
    mufu_per_tile: float = 0.0  # transcendental tile elements (exp, exp2, log, ...) per tile: the SFU's work
    load_bytes_per_tile: int = 0  # global -> register bytes one tile reads (`load`: not staged in shared memory)
    alu_per_tile: float = 0.0  # elementwise tile operations per tile (CUDA cores: outside the tensor cores)

    @property
    def main(self) -> MmaSite | None:
        return max(self.mma, key=lambda s: s.m * s.n * s.k) if self.mma else None

    @property
    def mma_flops_per_step(self) -> int:
        s = self.main
        return 2 * s.m * s.n * s.k if s else 0

    @property
    def executed_mma_flops(self) -> float:
        if self.mma_flops_per_tile:
            return float(self.tiles) * self.mma_flops_per_tile
        return float(self.tiles) * self.ksteps * self.mma_flops_per_step

    def dim(self, name: str) -> int | None:
        return dict(self.dims).get(name)


def _shape(x) -> tuple[int, ...]:
    if isinstance(x, ir.Ref):
        return x.shape
    if isinstance(x, ir.Expr) and isinstance(x.type, TileT):
        return x.type.shape
    return ()


def _walk(stmts, fn, role: str | None = None) -> None:
    for s in stmts:
        fn(s, role)
        if isinstance(s, ir.For):
            _walk(s.body, fn, role)
        elif isinstance(s, ir.If):
            _walk(s.then, fn, role)
            _walk(s.orelse, fn, role)
        elif isinstance(s, ir.Role):
            _walk(s.body, fn, s.kind)


def _exprs(node):
    """Every expression under a statement (for finding mma sites)."""
    if isinstance(node, ir.Expr):
        yield node
    if isinstance(node, (ir.Expr, ir.Stmt, ir.Ref)):
        for f in node.__dataclass_fields__:
            if f in ("span", "type", "body", "then", "orelse"):
                continue
            v = getattr(node, f)
            for x in (v if isinstance(v, tuple) else (v,)):
                if isinstance(x, (ir.Expr, ir.Ref)):
                    yield from _exprs(x)
                elif isinstance(x, tuple):
                    for y in x:
                        if isinstance(y, (ir.Expr, ir.Ref)):
                            yield from _exprs(y)


MUFU = ("exp", "exp2", "log", "log2", "rsqrt", "sqrt")


def _mma_key_flops(e: ir.Mma) -> tuple[tuple, float]:
    a, b = _shape(e.a), _shape(e.b)
    m, k = (a[-2], a[-1]) if len(a) >= 2 else (0, 0)
    n = b[-1] if len(b) >= 2 else 0
    return (e.span, m, n, k), 2.0 * m * n * k


class _Counter:
    """Executions of mma and bytes copied/stored for one tile of one block, with loop trips multiplied."""

    def __init__(self, env: dict[str, int]):
        self.env = env
        self.mma = 0
        self.sites: dict[tuple, float] = {}  # executions per mma site (source span and shape)
        self.mma_flops = 0.0
        self.mufu = 0.0
        self.copy_bytes = 0
        self.by_tensor: dict[str, float] = {}
        self.store_bytes = 0
        self.load_bytes = 0.0  # global -> register reads (`load(...)`): a bandwidth-bound kernel's inputs
        self.alu = 0.0  # elementwise tile operations on the CUDA cores (one per element and operator)
        self.persistent_trips: int | None = None
        self.top_env: dict[str, int] = {}  # scalars known before the first loop or role
        self.per_block: set[str] = set()  # names whose value differs between blocks

    def _per_block(self, e) -> bool:
        """Whether `e` depends on which block runs it (its block ids, or names derived from them)."""
        return any((isinstance(x, ir.Special) and x.kind == "block_id") or
                   (isinstance(x, ir.Var) and x.name in self.per_block) for x in _exprs(e))

    def _loads(self, s, mult: float) -> None:
        for e in _exprs(s):
            if isinstance(e, ir.Load) and e.ref is not None and e.ref.space == "global":
                self.load_bytes += mult * math.prod(e.ref.shape) * e.ref.dtype.bytes
            elif isinstance(e, (ir.Bin, ir.Un, ir.Cmp, ir.Select, ir.Math)) and isinstance(e.type, TileT):
                self.alu += mult * math.prod(e.type.shape)
            elif isinstance(e, ir.Reduce) and isinstance(getattr(e.x, "type", None), TileT):
                self.alu += mult * math.prod(e.x.type.shape)  # every input element is combined once

    def run(self, stmts, mult: float = 1.0) -> None:
        for s in stmts:
            if isinstance(s, (ir.Let, ir.Store, ir.Copy)):  # a Copy's source may be a `load` (through registers)
                self._loads(s, mult)
            if isinstance(s, ir.Let):
                if self._per_block(s.value):
                    self.per_block.add(s.name)
                else:
                    self.per_block.discard(s.name)
                try:
                    self.env[s.name] = ev(s.value, self.env)
                except (Unknown, TypeError, KeyError):
                    self.env.pop(s.name, None)
                for e in _exprs(s):
                    if isinstance(e, ir.Mma):
                        self.mma += mult
                        key, fl = _mma_key_flops(e)
                        self.sites[key] = self.sites.get(key, 0) + mult
                        self.mma_flops += mult * fl
                    elif isinstance(e, ir.Math) and e.fn in MUFU and isinstance(e.type, TileT):
                        self.mufu += mult * math.prod(e.type.shape)
            elif isinstance(s, ir.Copy) and s.dst is not None and isinstance(s.src, ir.Ref) \
                    and s.src.space == "global":
                nbytes = mult * math.prod(s.dst.shape) * s.dst.dtype.bytes
                self.copy_bytes += nbytes
                self.by_tensor[s.src.base] = self.by_tensor.get(s.src.base, 0) + nbytes
            elif isinstance(s, ir.Store) and s.dst is not None and s.dst.space == "global":
                self.store_bytes += mult * math.prod(s.dst.shape) * s.dst.dtype.bytes
            elif isinstance(s, ir.AtomicAdd) and s.dst is not None:  # read-modify-write
                self.store_bytes += 2 * mult * math.prod(s.dst.shape) * s.dst.dtype.bytes
            elif isinstance(s, ir.For):
                if not self.top_env:
                    self.top_env = dict(self.env)
                try:
                    start, stop, step = (int(ev(x, self.env)) for x in (s.start, s.stop, s.step))
                    trips = max(0, -(-(stop - start) // step)) if step > 0 else 0
                except (Unknown, TypeError, KeyError):
                    start, trips = 0, 1
                self.env[s.var] = start
                if s.kind == "persistent" or self._per_block(s.start):
                    self.per_block.add(s.var)
                else:
                    self.per_block.discard(s.var)
                if s.kind == "persistent":
                    self.persistent_trips = trips
                    self.run(s.body, mult)  # counted per tile
                else:
                    self.run(s.body, mult * trips)
            elif isinstance(s, ir.If):
                try:
                    if self._per_block(s.cond):
                        raise Unknown("differs between blocks")
                    c = ev(s.cond, self.env)
                except (Unknown, TypeError, KeyError):
                    # Undecidable here (block ids, data): count the costlier side, so a cheap path on
                    # the one block the model walks cannot make the estimate optimistic.
                    c = self._cost(s.then, mult) >= self._cost(s.orelse, mult)
                self.run(s.then if c else s.orelse, mult)
            elif isinstance(s, ir.Role):
                if not self.top_env:
                    self.top_env = dict(self.env)
                if s.kind == "consumer":
                    self.run(s.body, mult)
                else:  # the producer's copies
                    sub = _Counter(dict(self.env))
                    sub.per_block = set(self.per_block)
                    sub.run(s.body, mult)
                    self.copy_bytes += sub.copy_bytes
                    self.load_bytes += sub.load_bytes
                    self.alu += sub.alu
                    self.persistent_trips = self.persistent_trips or sub.persistent_trips
                    for k, v in sub.by_tensor.items():
                        self.by_tensor[k] = self.by_tensor.get(k, 0) + v


    def _cost(self, stmts, mult: float) -> tuple[float, float]:
        sub = _Counter(dict(self.env))
        sub.per_block = set(self.per_block)
        sub.run(stmts, mult)
        return sub.mma, sub.copy_bytes + sub.store_bytes + sub.load_bytes


def _panels(kernel: ir.Kernel, env: dict[str, int]) -> dict[str, tuple]:
    """Start coordinates (at the first k step) of the first copy from each input tensor for one tile."""
    found: dict[str, tuple] = {}

    def go(stmts, env):
        for s in stmts:
            if isinstance(s, ir.Let):
                try:
                    env[s.name] = ev(s.value, env)
                except (Unknown, TypeError, KeyError):
                    env.pop(s.name, None)
            if isinstance(s, ir.Copy) and isinstance(s.src, ir.Ref) and s.src.space == "global" \
                    and s.src.base not in found:
                coords = []
                for st in s.src.starts:
                    try:
                        coords.append(ev(st, env))
                    except (Unknown, TypeError, KeyError):
                        coords.append(None)
                found[s.src.base] = tuple(coords)
            elif isinstance(s, ir.For):
                try:
                    env[s.var] = ev(s.start, env) if s.kind != "persistent" else env.get("__tile__", 0)
                except (Unknown, TypeError, KeyError):
                    env[s.var] = 0
                go(s.body, env)
            elif isinstance(s, ir.If):
                go(s.then, env)
                go(s.orelse, env)
            elif isinstance(s, ir.Role):
                go(s.body, dict(env))

    go(kernel.body, dict(env))
    return found


def extract(kernel: ir.Kernel, dims: dict[str, int]) -> Features:
    """Features of `kernel` at `dims` (block 0 walked once, loop trips multiplied)."""
    base = {**{d: int(v) for d, v in dims.items()}}
    for n, v in kernel.params:
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            base[n] = v
    grid = []
    for g in kernel.grid:
        try:
            grid.append(int(ev(g, base)))
        except (Unknown, TypeError, KeyError):
            grid.append(1)
    blocks = math.prod(grid)
    env0 = dict(base)
    for ax in range(3):
        env0[f"block_id({ax})"] = 0
        env0[f"num_blocks({ax})"] = grid[ax] if ax < len(grid) else 1

    allocs: list[ir.AllocShared] = []
    barriers = 0
    roles: list[ir.Role] = []
    sites: list[MmaSite] = []
    modes: set[str] = set()
    persistent = False
    operand_bufs: set[str] = set()

    def visit(s, role):
        nonlocal barriers, persistent
        if isinstance(s, ir.AllocShared):
            allocs.append(s)
        elif isinstance(s, ir.AllocBarrier):
            barriers += s.n or 1
        elif isinstance(s, ir.Role):
            roles.append(s)
        elif isinstance(s, ir.Copy) and isinstance(s.src, ir.Ref) and s.src.space == "global":
            modes.add(s.mode)
        elif isinstance(s, ir.For) and s.kind == "persistent":
            persistent = True
        for e in _exprs(s):
            if isinstance(e, ir.Mma):
                for opnd in (e.a, e.b):
                    if isinstance(opnd, ir.Ref) and opnd.space == "shared":
                        operand_bufs.add(opnd.base)
                lay = e.layout
                a, b = _shape(e.a), _shape(e.b)
                m, k = (a[-2], a[-1]) if len(a) >= 2 else (0, 0)
                n = b[-1] if len(b) >= 2 else 0
                if lay is not None:
                    sites.append(MmaSite(e.instr, lay.tile[0], lay.tile[1], k, lay.warps_m, lay.warps_n,
                                         lay.inst_shape[1], role))
                else:
                    sites.append(MmaSite(e.instr, m, n, k, 1, 1, n, role))

    _walk(kernel.body, visit)
    smem = sum(math.prod(a.shape) * a.dtype.bytes for a in allocs) + 8 * barriers
    ops = [a for a in allocs if a.name in operand_bufs] or allocs
    ring = max((a.shape[0] for a in ops if len(a.shape) >= 3), default=1)
    swz = min((a.swizzle for a in ops), default=0)
    row_bytes = tuple(a.shape[-1] * a.dtype.bytes for a in ops)
    prod = [r for r in roles if r.kind == "producer"]
    cons = [r for r in roles if r.kind == "consumer"]

    counter = _Counter(dict(env0))
    counter.run(kernel.body)
    if not counter.top_env:
        counter.top_env = dict(counter.env)
    # Work that varies between blocks (a causal kv loop, an expert's rows): averaged over sampled blocks.
    samples = [counter]
    for b in _sample_blocks(grid):
        env_b = dict(env0)
        for ax, v in enumerate(b):
            env_b[f"block_id({ax})"] = v
        c = _Counter(env_b)
        c.run(kernel.body)
        samples.append(c)
    avg = lambda f: sum(f(c) for c in samples) / len(samples)  # noqa: E731
    ksteps = int(round(avg(lambda c: max(c.sites.values(), default=0)))) if sites else 0
    tiles = blocks
    if persistent:
        total = None
        for s in _persistent_loops(kernel.body):
            try:
                total = int(ev(s.stop, counter.top_env))
            except (Unknown, TypeError, KeyError):
                pass
        tiles = total if total is not None else blocks

    return Features(
        kernel=kernel.name, dims=tuple(sorted((d, int(v)) for d, v in dims.items())), threads=kernel.threads,
        grid=tuple(grid), blocks=blocks, cluster=tuple(kernel.cluster), smem_bytes=int(smem), ring_depth=int(ring),
        swizzle=int(swz), operand_row_bytes=row_bytes, copy_mode=sorted(modes)[0] if modes else "none",
        mma=tuple(sites), warp_specialised=bool(roles),
        producer_warpgroups=sum(r.warpgroups for r in prod), consumer_warpgroups=sum(r.warpgroups for r in cons),
        producer_regs=prod[0].registers if prod else None, consumer_regs=cons[0].registers if cons else None,
        persistent=persistent, tiles=int(tiles), ksteps=ksteps,
        copy_bytes_per_tile=int(avg(lambda c: c.copy_bytes)),
        panel_bytes=tuple(sorted((k, int(v)) for k, v in counter.by_tensor.items())),
        store_bytes_per_tile=int(counter.store_bytes), env=tuple(sorted(
            (k, v) for k, v in counter.top_env.items() if isinstance(v, (int, float)) and not isinstance(v, bool))),
        mma_flops_per_tile=avg(lambda c: c.mma_flops), mufu_per_tile=avg(lambda c: c.mufu),
        load_bytes_per_tile=int(avg(lambda c: c.load_bytes)), alu_per_tile=avg(lambda c: c.alu))


def _sample_blocks(grid: list[int]) -> list[tuple[int, ...]]:
    """Blocks evenly spaced along the first grid axis (where tile work varies: a causal kv loop, an
    expert's rows), and the last block along each other axis (block 0 is walked anyway)."""
    out: list[tuple[int, ...]] = []
    zero = [0] * len(grid)
    for ax, g in enumerate(grid):
        values = sorted({round(i * (g - 1) / 7) for i in range(8)}) if ax == 0 else [g - 1]
        for v in values:
            b = list(zero)
            b[ax] = v
            if v > 0 and tuple(b) not in out:
                out.append(tuple(b))
    return out


@dataclass(frozen=True)
class Wave:
    tiles: int  # tiles running at once
    unique_bytes: int  # distinct operand panel bytes they load (what HBM must deliver at least)
    total_bytes: int  # bytes they load counted per tile (what crosses L2 -> SM)


def simulate_wave(kernel: ir.Kernel, f: Features, concurrent_blocks: int) -> Wave:
    """Which operand panels do the first `concurrent_blocks` tiles (in launch order) share?

    Evaluates the program's own tile -> coordinates mapping, so grouped rasterisation, swizzled tile
    orders and persistent striding are all judged by what they compute.
    """
    n_wave = max(1, min(concurrent_blocks, f.tiles))
    env0 = dict(f.env)
    keys: dict[str, set] = {}
    for t in range(n_wave):
        env = dict(env0)
        if f.persistent:
            env["block_id(0)"] = t % max(1, f.grid[0])
            env["__tile__"] = t
        else:
            rem = t
            for ax, g in enumerate(f.grid):
                env[f"block_id({ax})"] = rem % g
                rem //= g
        for name, coords in _panels(kernel, env).items():
            keys.setdefault(name, set()).add(coords)
    panel = dict(f.panel_bytes)
    unique = sum(len(v) * panel.get(name, 0) for name, v in keys.items())
    total = n_wave * f.copy_bytes_per_tile
    return Wave(n_wave, int(min(unique, total)), int(total))


def _persistent_loops(stmts):
    for s in stmts:
        if isinstance(s, ir.For):
            if s.kind == "persistent":
                yield s
            yield from _persistent_loops(s.body)
        elif isinstance(s, ir.Role):
            yield from _persistent_loops(s.body)
        elif isinstance(s, ir.If):
            yield from _persistent_loops(s.then)
            yield from _persistent_loops(s.orelse)
