"""IR kernel -> CUDA C++: statements, scalar and elementwise tile expressions, scopes and roles.

The generated function mirrors the IR statement by statement, each preceded by a `#line` directive
naming its `.arg` line, so compiler messages (and profilers) point at the source. Structure:

* one `extern "C" __global__` function; tensors arrive as pointers plus row strides (the runtime may
  pass a padded copy), runtime dims and scalars by value, tensor maps as `__grid_constant__`;
* shared buffers and mbarriers live in one dynamic shared-memory block, each buffer aligned to its
  swizzle pattern (1024 B), at offsets fixed here;
* scalar locals are hoisted to the top of their scope (the block, or a role), register tiles are
  per-thread arrays distributed by their RegLayout (argus/codegen/tiles.py);
* consecutive roles become one if / else-if chain over warpgroups (what `setmaxnreg` needs); a
  role that only issues bulk copies and mbarrier operations runs on its first thread;
* index tiles (layout "index") get no array: their definition is recorded with its scalar parts
  copied into snapshot locals, and each read evaluates it (argus/codegen/exprs.py);
* a deferred wgmma wait is emitted before the first statement that touches its accumulator (or
  writes shared memory / synchronises): `wait_group N` leaves the N groups committed after it in
  flight.

Expressions live in argus/codegen/exprs.py, the shared-memory plan in smem.py, memory operations in
memory.py, MMAs in mma.py.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field

from argus.codegen import atomics, held_release, memory, mma
from argus.codegen import bulk_store as bulk_store_mod
from argus.codegen import release_lag as lag_mod
from argus.codegen.cexpr import (
    C_KEYWORDS,
    compute_type,
    ctype,
    from_compute,
    is_narrow_float,
    to_compute,
)
from argus.codegen.errors import unsupported
from argus.codegen.exprs import Expressions, sub_exprs, walk_stmts
from argus.codegen.prelude import prelude
from argus.codegen.smem import Buffer, MBarrier
from argus.codegen.spec import GeneratedKernel, ParamSpec, TmaSpec
from argus.codegen.tiles import TileMap
from argus.dsl.diagnostics import Span, error
from argus.dsl.types import ScalarT, TileT
from argus.ir import nodes as ir
from argus.ir.passes.layouts import blocked_reg_layout, shared_tile_layout
from argus.ir.smem_layout import offsets as placement_offsets
from argus.ir.transform import rewrite, scope_stmts

MAX_SMEM = 227 * 1024  # per block on sm_90 (232448 B opt-in)
DEFER_ENV = "ARGUS_WGMMA_WAIT"  # "defer" or "eager": when the generated code waits for a wgmma group
DEFER_DEFAULT = "defer"  # measured on the H200: +12% for the cp.async + wgmma pipeline (RESULTS.md)
# Statements that neither read registers written by an outstanding wgmma nor write shared memory it
# may be reading: a deferred wgmma wait can move past them.
_WGMMA_SAFE = (ir.WaitGroup, ir.Commit, ir.AssertTag, ir.WaitBarrier, ir.AllocShared, ir.Assume, ir.Turn)
SMEM_ALIGN = 1024  # a 128B-swizzle pattern: 8 rows x 128 B
TURN_BASE = 8  # named barriers TURN_BASE + w order a role's warpgroups in turns; roles' own ids stay below
TURN_IDS = 16 - TURN_BASE


@dataclass
class Scope:
    """The threads running a statement list: the whole block, or one role's warpgroups."""

    threads: int
    tid: str  # C name of the thread index relative to the scope
    bar_id: int  # 0: __syncthreads; else a named barrier of `threads` threads
    single: bool = False  # only thread 0 of the scope runs the body
    layouts: dict[str, ir.RegLayout] = field(default_factory=dict)
    declared: set[str] = field(default_factory=set)
    parent: Scope | None = None

    def is_declared(self, name: str) -> bool:
        s: Scope | None = self
        while s is not None:
            if name in s.declared:
                return True
            s = s.parent
        return False

    def layout(self, name: str) -> ir.RegLayout | None:
        s: Scope | None = self
        while s is not None:
            if name in s.layouts:
                return s.layouts[name]
            s = s.parent
        return None


def single_thread_role(role: ir.Role) -> bool:
    """A role whose statements are all uniform control, scalars, mbarrier ops and bulk copies."""
    for s in walk_stmts(role.body):
        if isinstance(s, ir.Let) and isinstance(s.value.type, TileT):
            return False
        if isinstance(s, (ir.Store, ir.AtomicAdd, ir.Barrier, ir.Commit, ir.WaitGroup)):
            return False
        if isinstance(s, ir.Copy) and s.mode != "bulk":
            return False
    return True


class Emitter(Expressions):
    def __init__(self, kernel: ir.Kernel, path: str | None = None, sm: int = 90, *,
                 defer_wgmma: bool | None = None, blocks_per_sm: int | None = None,
                 uniform_select: bool = True, bulk_store: bool | None = None,
                 release_lag: bool | None = None) -> None:
        self.k = kernel
        self.here: Span | None = None  # the statement being emitted (Emitter.at)
        self.in_turn: ir.Turn | None = None  # inside a `with turn():` block (Emitter.turn)
        if bulk_store is None:
            bulk_store = os.environ.get(bulk_store_mod.STORE_ENV, "tma") != "direct"
        # accumulator stores of warp-specialised roles as TMA stores through shared (codegen/bulk_store.py)
        self.bulk_store = bulk_store
        self.reads = bulk_store_mod.tensors_read(kernel)
        self.bulk_outputs: set[str] = set()
        self.staging_need: dict[int, int] = {}  # scope barrier id -> bytes of its two staging buffers
        self.bulk_scopes: set[int] = set()
        self.loop_depth = 0  # loops around the statement being emitted
        self.uniform_select = uniform_select
        self.blocks_per_sm = blocks_per_sm
        if defer_wgmma is None:
            defer_wgmma = os.environ.get(DEFER_ENV, DEFER_DEFAULT) == "defer"
        # Wait for a wgmma group lazily: only before the next statement that could touch the
        # accumulator or shared memory (argus/codegen/mma.py); acc name -> registers to fence.
        self.defer_wgmma = defer_wgmma
        self.pending: dict[str, int] = {}  # in commit order: waiting for one waits for those before it
        # consumer step loops whose stage release is deferred by one step (codegen/release_lag.py)
        self.lags = lag_mod.lagged_steps(kernel, release_lag) if defer_wgmma else {}
        # the lag being emitted and the local holding the deferred barrier address
        self.lag: tuple[lag_mod.Lag, str] | None = None
        # a consumer holding two ring stages in the source (codegen/held_release.py): its step loop,
        # the release variable while that loop is emitted, the release recorded, the branches around
        self.hold = held_release.hold_of(kernel, defer_wgmma)
        self.hold_var: str | None = None
        self.held: held_release.Held | None = None
        self.if_stack: list[int] = []
        self.defer_reg_a = False  # leave register-A wgmmas in flight (inside the hold step loop)
        self.path = path or kernel.path
        self.sm = sm
        self.lines: list[str] = []
        self.depth = 1
        self.last_line: int | None = None
        self.features: set[str] = set()
        self.extra: dict[str, str] = {}  # helper name -> definition (wgmma shapes)
        self.buffers: dict[str, Buffer] = {}
        self.mbars: dict[str, MBarrier] = {}
        self.tmaps: list[TmaSpec] = []
        self.aligned_inputs: set[str] = set()
        self.smem_top = 0
        self.counter = 0
        self.uses_wgmma = any(isinstance(e, ir.Mma) and e.instr == "wgmma"
                              for s in walk_stmts(kernel.body) for e in _stmt_exprs(s))
        # the kernel needs sm_90 on its own (wgmma or TMA copies): lowerings may add sm_90 instructions
        self.sm90_native = self.uses_wgmma or any(isinstance(s, ir.Copy) and s.mode == "bulk"
                                                  for s in walk_stmts(kernel.body))
        self.cname: dict[str, str] = {}
        self.params: list[ParamSpec] = []
        self._plan_params()
        self.nonneg = self._nonneg_names()
        self.scope = Scope(kernel.threads, "ag_tid", 0)
        self.role_index = 0
        # shared scratch of cross-thread exchanges (argus/codegen/exchange.py): scope barrier id -> bytes
        self.scratch_need: dict[int, int] = {}
        # Two scratch regions per scope, alternated: a region is "dirty" while some thread may still be
        # reading it (from its last write's barrier until the scope's next barrier). A write into a clean
        # region needs no barrier before it; only when both are dirty does one come first. Loops and
        # branches forget what is known (dirty everywhere at their entry and exit).
        self.scratch_dirty: dict[int, set[int]] = {}
        self.scratch_unknown = False
        self.scratch_claim: tuple[int, int] | None = None  # (scope key, region) written, its barrier pending
        self.scratch_two: set[int] = set()  # scope keys that used region 1
        # index tiles (layout "index": arange arithmetic, never stored): the definition in force, with
        # its scalar parts read from snapshots taken at the definition (argus/codegen/exprs.py)
        self.index_def: dict[str, ir.Expr] = {}
        self.index_ambiguous: set[str] = set()  # defined on some paths only (after an if / a loop)
        self.index_plan: dict[int, tuple[ir.Expr, list[tuple[str, ir.Expr]]]] = {}

    # ---- names ------------------------------------------------------------------------------------
    def _plan_params(self) -> None:
        taken: set[str] = set()

        def fresh(name: str) -> str:
            c = name if name not in C_KEYWORDS and not name.startswith("ag_") else f"{name}_"
            while c in taken:
                c += "_"
            taken.add(c)
            return c

        for t in self.k.tensors:
            c = fresh(t.name)
            self.cname[t.name] = c
            const = "const " if t.name not in self.k.outputs else ""
            self.params.append(ParamSpec("tensor", c, f"{const}{ctype(t.dtype)}* __restrict__", t.name))
            for ax in range(len(t.dims) - 1):
                self.params.append(ParamSpec("stride", fresh(f"{t.name}_s{ax}"), "long long", t.name, axis=ax))
        for d in self.k.dims:
            c = fresh(d)
            self.cname[d] = c
            self.params.append(ParamSpec("dim", c, "int", d))
        for s in self.k.scalars:
            c = fresh(s.name)
            self.cname[s.name] = c
            self.params.append(ParamSpec("scalar", c, compute_type(s.dtype), s.name))
        self.taken = taken

    def local(self, name: str) -> str:
        c = self.cname.get(name)
        if c is None:
            c = name if name not in C_KEYWORDS and not name.startswith("ag_") and name not in self.taken \
                else f"{name}_"
            self.cname[name] = c
        return c

    def tmp(self, stem: str) -> str:
        self.counter += 1
        return f"ag_{stem}{self.counter}"

    def stride(self, tensor: str, axis: int) -> str:
        t = self.k.tensor(tensor)
        if axis == len(t.dims) - 1:
            return "1"
        return next(p.name for p in self.params if p.kind == "stride" and p.arg == tensor and p.axis == axis)

    def dim(self, tensor: str, axis: int) -> str:
        d = self.k.tensor(tensor).dims[axis]
        return str(d) if isinstance(d, int) else self.cname[d]

    # ---- output -----------------------------------------------------------------------------------
    def line(self, text: str) -> None:
        self.lines.append("  " * self.depth + text)

    def at(self, span: Span | None) -> None:
        """Attribute what follows to the `.arg` line of `span`."""
        self.here = span
        if span is not None and span.line != self.last_line:
            self.lines.append(f'#line {span.line} "{self.path}"')
            self.last_line = span.line

    def open(self, head: str) -> None:
        self.line(f"{head} {{" if head else "{")
        self.depth += 1

    def close(self, tail: str = "") -> None:
        self.depth -= 1
        self.line("}" + tail)

    # ---- analyses -------------------------------------------------------------------------------
    def _plan_mbarrier_scales(self) -> None:
        """One IR `arrive` from a multi-warp scope becomes one hardware arrival per warp (after the
        warp's own work), so no block-wide barrier is needed; the count is scaled to match. A barrier
        that also receives expect_tx (a single-thread arrival) keeps count 1 per IR arrival."""
        sites: dict[str, list[tuple[str, int, bool]]] = {}

        def scan(body, threads: int, single: bool) -> None:
            for s in body:
                if isinstance(s, ir.Role):
                    scan(s.body, s.warpgroups * 128, single_thread_role(s))
                    continue
                if isinstance(s, (ir.Arrive, ir.ExpectTx)):
                    kind = "arrive" if isinstance(s, ir.Arrive) else "expect_tx"
                    sites.setdefault(s.barrier.name, []).append((kind, threads, single))
                for f in ("body", "then", "orelse"):
                    if hasattr(s, f):
                        scan(getattr(s, f), threads, single)

        scan(self.k.body, self.k.threads, False)
        for name, lst in sites.items():
            warps = {t // 32 for kind, t, single in lst if kind == "arrive" and not single}
            if name in self.mbars and len(warps) == 1 and all(k == "arrive" and not sg for k, _, sg in lst):
                self.mbars[name] = dataclasses.replace(self.mbars[name], scale=warps.pop())

    # ---- driver -----------------------------------------------------------------------------------
    def generate(self) -> GeneratedKernel:
        k = self.k
        for s in walk_stmts(k.body):
            if isinstance(s, ir.AllocShared):
                self._alloc_shared(s)
            elif isinstance(s, ir.AllocBarrier):
                self._alloc_barrier(s)
        self._plan_mbarrier_scales()
        body_start = len(self.lines)
        self.block_scope(k.body, self.scope)
        body = self.lines[body_start:]
        self.lines = self.lines[:body_start]
        scratch = []
        for key, need in sorted(self.scratch_need.items()):
            for region in (0, 1) if key in self.scratch_two else (0,):
                off = -(-self.smem_top // 16) * 16
                name = f"ag_scratch{key}" + ("_1" if region else "")
                scratch.append(f"  unsigned char* const {name} = ag_smem_ptr + {off};  "
                               f"// {need} B: reductions and layout conversions across warps"
                               + (" (the second region)" if region else ""))
                self.smem_top = off + need
        for key, need in sorted(self.staging_need.items()):
            off = -(-self.smem_top // 1024) * 1024  # the 128-byte swizzle repeats every 1024 bytes
            scratch.append(f"  const ag_u32 ag_stage{key} = ag_smem + {off}u;  "
                           f"// {need} B: two staging buffers of TMA stores")
            self.smem_top = off + need
        smem = self.smem_top + (SMEM_ALIGN if self.smem_top else 0)
        if self.staging_need and smem - SMEM_ALIGN > MAX_SMEM:
            raise StagingTooBig()
        if smem - SMEM_ALIGN > MAX_SMEM:
            raise error("codegen", f"the kernel needs {self.smem_top} B of shared memory; a block can have "
                        f"at most {MAX_SMEM} B", k.span)
        if self.uses_wgmma or "tma" in self.features:
            self.sm = max(self.sm, 90)
        # (8-bit mma.sync exists from sm_89; built, like the rest, for sm_90a)
        min_sm = 90 if self.features & {"wgmma", "tma", "mbarrier", "setmaxnreg", "proxy-fence", "mma.sync.fp8"} else 80
        sig_params = list(self.params) + [
            ParamSpec("tmap", f"ag_tm{i}", "const __grid_constant__ AgTmaMap", t.tensor, tmap=i)
            for i, t in enumerate(self.tmaps)]
        bounds = f"__launch_bounds__({k.threads}{self._min_blocks(smem)})"
        cluster = f" __cluster_dims__({', '.join(map(str, (k.cluster + (1, 1))[:3]))})" if k.cluster != (1,) else ""
        head = [
            f"// Generated by Argus from {self.path}: kernel {k.name}.",
            f"// params: {', '.join(f'{n}={v!r}' for n, v in k.params)}",
            "// Do not edit: regenerate with `argus build`.",
        ]
        pre = prelude(frozenset(self.features), list(self.extra.values()),
                      fp8=any(t.dtype.name.startswith("f8") for t in k.tensors))
        args = ",\n    ".join(f"{p.ctype} {p.name}" for p in sig_params)
        out = head + [pre, f'#line {k.span.line} "{self.path}"',
                      f'extern "C" __global__ void{cluster} {bounds}\n{self.entry}(\n    {args}) {{']
        if self.smem_top:
            out += ["  extern __shared__ __align__(1024) unsigned char ag_smem_raw[];",
                    "  // 1024-byte aligned base: swizzle patterns (and wgmma descriptors) assume it",
                    "  const ag_u32 ag_smem = (ag_smem_u32(ag_smem_raw) + 1023u) & ~1023u;",
                    "  unsigned char* const ag_smem_ptr = ag_smem_raw + (ag_smem - ag_smem_u32(ag_smem_raw));"]
            out += scratch
        out += ["  const int ag_tid = threadIdx.x;"]
        out += body + ["}", ""]
        return GeneratedKernel(
            name=self.entry, kernel=k.name, path=self.path, source="\n".join(out), threads=k.threads,
            smem_bytes=smem, params=tuple(sig_params), tensor_maps=tuple(self.tmaps),
            aligned_inputs=tuple(sorted(self.aligned_inputs)), features=frozenset(self.features),
            min_sm=min_sm, cluster=k.cluster, bulk_outputs=tuple(sorted(self.bulk_outputs)))

    def _min_blocks(self, smem: int) -> str:
        """setmaxnreg needs a register cap at entry: one block per SM. Without roles, ask for two blocks
        per SM when their shared memory fits: one block's barrier and copy-issue gaps are then filled by
        the other's MMAs (it caps registers at 32768 / threads)."""
        if any(isinstance(s, ir.Role) for s in self.k.body):
            # setmaxnreg moves registers inside a block's own allocation (65536 / blocks_per_sm): the roles'
            # budget is checked against it in the role chain; here the blocks' shared memory must fit
            occ = self.k.blocks_per_sm or 1
            if occ * smem > MAX_SMEM + SMEM_ALIGN:
                raise unsupported(f"blocks_per_sm={occ}: {occ} blocks of {smem} B of shared memory do not fit a "
                                  "multiprocessor", self.k.span, "lower blocks_per_sm or the shared buffers")
            return f", {occ}"
        if self.k.blocks_per_sm is not None:  # the kernel's own launch option wins
            if self.k.blocks_per_sm * smem > MAX_SMEM + SMEM_ALIGN:
                raise unsupported(f"blocks_per_sm={self.k.blocks_per_sm}: {self.k.blocks_per_sm} blocks of "
                                  f"{smem} B of shared memory do not fit a multiprocessor", self.k.span,
                                  "lower blocks_per_sm or the shared buffers")
            return f", {self.k.blocks_per_sm}"
        if self.blocks_per_sm is not None:
            return f", {self.blocks_per_sm}"
        if 2 * smem <= MAX_SMEM + SMEM_ALIGN and self.k.threads <= 512:
            return ", 2"
        return ""

    @property
    def entry(self) -> str:
        return self.k.name if self.k.name not in C_KEYWORDS and not self.k.name.startswith("ag_") \
            else f"argus_{self.k.name}"

    def _alloc_shared(self, s: ir.AllocShared) -> None:
        if s.name in self.buffers:
            raise unsupported("a shared buffer allocated twice", s.span)
        rows, cols = (1, s.shape[0]) if len(s.shape) == 1 else s.shape[-2:]
        try:
            tile = shared_tile_layout(s.dtype, s.shape, s.swizzle)
        except ValueError as exc:
            raise error("codegen", f"shared buffer '{s.name}': {exc}", s.span) from None
        if s.layout is not None:  # explicit placement: a stage is as long as its largest offset
            inner = placement_offsets(s.layout, s.shape[-2:])
            stage = int(inner.max()) + 1 if inner.size else 0
        else:
            stage = rows * cols
            if len(s.shape) > 2 and s.swizzle and stage % tile.swizzle.period:
                raise error("codegen", f"shared buffer '{s.name}': a {rows}x{cols} tile is not a whole number of "
                            f"{s.swizzle}B swizzle patterns", s.span)
        off = -(-self.smem_top // SMEM_ALIGN) * SMEM_ALIGN
        self.buffers[s.name] = Buffer(s.name, s, off, tile, rows, cols, stage)
        self.smem_top = off + self.buffers[s.name].nbytes

    def _alloc_barrier(self, s: ir.AllocBarrier) -> None:
        off = -(-self.smem_top // 8) * 8
        n = s.n or 1
        self.mbars[s.name] = MBarrier(s.name, off, n, s.count)
        self.smem_top = off + 8 * n
        self.features.add("mbarrier")

    # ---- scopes -----------------------------------------------------------------------------------
    def block_scope(self, body: tuple[ir.Stmt, ...], scope: Scope) -> None:
        """Declare the scope's locals, then emit its statements."""
        prev, self.scope = self.scope, scope
        self.declare(body)
        self.stmts(body)
        self.flush_wgmma()
        bulk_store_mod.finish(self)
        self.scope = prev

    def flush_wgmma(self, names: set[str] | None = None) -> None:
        """Wait for the outstanding wgmma groups writing `names` (all when None), and those before them:
        wait_group N leaves the N newest groups in flight."""
        if not self.pending:
            return
        order = list(self.pending)
        need = [k for k, n in enumerate(order) if names is None or n in names]
        if not need:
            return
        last = need[-1]
        keep = len(order) - 1 - last
        what = "mma before" if keep == 0 else f"mma before ({keep} newer group(s) stay in flight)"
        self.line(f"ag_wgmma_wait<{keep}>();  // the deferred wait of the {what}")
        for name in order[:last + 1]:
            self.line("#pragma unroll")
            self.line(f"for (int ag_i = 0; ag_i < {self.pending.pop(name)}; ++ag_i) ag_reg_fence({name}[ag_i]);")
        if self.held is not None and not self.held.names & set(self.pending):
            self.fire_held()

    def fire_held(self, force: bool = False) -> None:
        """Make the recorded stage release (held_release.py) once the wgmmas issued before it are done
        (force: wait for them here). Outside the branches it was recorded in it is made for every path."""
        h = self.held
        if force and h.names & set(self.pending):
            self.flush_wgmma(set(h.names))  # fires it
            return
        self.open(f"if ({h.var}_on)")
        self.arrive(h.arrive, bar=h.var)
        self.line(f"{h.var}_on = false;")
        self.close()
        if tuple(self.if_stack) == h.ifs[:len(self.if_stack)]:
            self.held = None

    def _wgmma_needs(self, s: ir.Stmt) -> set[str] | None:
        """Pending accumulators statement `s` touches (None: it must wait for every wgmma, e.g. it
        writes shared memory a wgmma may be reading, or synchronises with threads that do)."""
        if isinstance(s, _WGMMA_SAFE) or (isinstance(s, ir.Let) and isinstance(s.value.type, ScalarT)):
            return set()
        if self.hold_var is not None and isinstance(s, ir.Arrive) and s.barrier.name == self.hold.empty:
            return set()  # recorded, made once the wgmmas before it are done (held_release.py)
        if isinstance(s, ir.Let) and isinstance(s.value.type, TileT):
            names = {x.name for x in sub_exprs(s.value) if isinstance(x, ir.Var)} | {s.name}
            return {self.local(n) for n in names} & set(self.pending)
        if isinstance(s, ir.If):  # a scalar condition: what its branches touch
            need: set[str] = set()
            for x in (*s.then, *s.orelse):
                n = self._wgmma_needs(x)
                if n is None:
                    return None
                need |= n
            return need
        if isinstance(s, (ir.Store, ir.AtomicAdd)) and isinstance(s.dst, ir.Ref) and s.dst.space == "global":
            return {self.local(x.name) for x in sub_exprs(s.value) if isinstance(x, ir.Var)} & set(self.pending)
        return None

    def declare(self, body) -> None:
        types: dict[str, tuple[str, int | None]] = {}
        for s in scope_stmts(body):
            if not isinstance(s, ir.Let):
                continue
            t = s.value.type
            if isinstance(t, TileT) and s.layout is not None and s.layout.kind == "index":
                self.scope.layouts[s.name] = s.layout
                for snap, sub in self._plan_index(s):
                    types[snap] = (compute_type(sub.type.dtype), None)
                continue
            if isinstance(t, TileT):
                if s.layout is None:
                    raise unsupported(f"register tile '{s.name}' here: it would need two different layouts",
                                      s.span, "it mixes mma accumulators of different shapes or warp grids")
                old = self.scope.layouts.get(s.name)
                if old is not None and old != s.layout:
                    raise unsupported(f"register tile '{s.name}' with two layouts", s.span)
                self.scope.layouts[s.name] = s.layout
                decl = (ctype(t.dtype), TileMap(s.layout, self.scope.tid).slots)
            elif isinstance(t, ScalarT):
                decl = (compute_type(t.dtype), None)
            else:
                continue
            if s.name in types and types[s.name] != decl:
                raise unsupported(f"'{s.name}' holding values of two different types", s.span)
            types[s.name] = decl
        for name, (ct, slots) in types.items():
            if self.scope.parent is not None and self.scope.parent.is_declared(name):
                continue
            self.scope.declared.add(name)
            self.line(f"{ct} {self.local(name)}{'' if slots is None else f'[{slots}]'};")

    def stmts(self, body: tuple[ir.Stmt, ...]) -> None:
        i = 0
        while i < len(body):
            s = body[i]
            if isinstance(s, ir.Role):
                j = i
                while j < len(body) and isinstance(body[j], ir.Role):
                    j += 1
                self.roles(body[i:j])
                i = j
                continue
            self.stmt(s)
            i += 1

    def roles(self, roles: tuple[ir.Role, ...]) -> None:
        if self.scope.parent is not None:
            raise unsupported("roles inside a role", roles[0].span)
        groups = self.k.threads // 128
        total = sum(r.warpgroups for r in roles)
        if self.k.threads % 128 or total > groups:
            raise error("codegen", f"the roles need {total} warpgroups but the block has {self.k.threads} threads",
                        roles[0].span, "launch with warpgroups= covering every role")
        # registers per thread under __launch_bounds__(T, blocks_per_sm): the block's allocation, which
        # setmaxnreg redistributes among its warps (one block per SM unless the launch asks for more)
        occ = self.k.blocks_per_sm or 1
        cap = min(255, 65536 // (occ * self.k.threads) // 8 * 8)
        budget = sum(r.warpgroups * 128 * (r.registers or cap) for r in roles)
        if any(r.registers is not None for r in roles) and budget > 65536 // occ:
            split = ", ".join(f"{r.kind}: {r.warpgroups} warpgroup(s) x {r.registers or cap}" for r in roles)
            where = "a multiprocessor has 65536" if occ == 1 else f"each of {occ} blocks per SM has {65536 // occ}"
            raise error("codegen", f"the roles' registers= ask for {budget} registers ({split}); {where}",
                        roles[0].span, f"lower registers= so that the roles' sum fits {65536 // occ // 128} per "
                        "warpgroup, or use fewer warpgroups" + (" or blocks_per_sm" if occ > 1 else ""))
        # setmaxnreg only when a role asks for more than the cap every thread gets at entry
        redistribute = any((r.registers or 0) > cap for r in roles)
        self.at(roles[0].span)
        self.open("")
        self.line("const int ag_wg = ag_tid >> 7;")
        base = 0
        for n, r in enumerate(roles):
            self.at(r.span)
            cond = f"ag_wg < {base + r.warpgroups}"
            head = f"if ({cond})" if n == 0 else f"}} else if ({cond})"
            if n:
                self.depth -= 1
            self.open(head)
            self.line(f"// role {r.kind!r}: warpgroups {base}..{base + r.warpgroups - 1}")
            if r.registers is not None and redistribute and r.registers != cap:
                if r.registers % 8 or not 24 <= r.registers <= 256:
                    raise error("codegen", f"registers={r.registers}: setmaxnreg takes a multiple of 8 in 24..256",
                                r.span)
                self.features.add("setmaxnreg")
                op = "inc" if r.registers > cap else "dec"
                self.line(f"ag_setmaxnreg_{op}<{r.registers}>();")
            self.line(f"const int ag_rtid = ag_tid - {base * 128};")
            if r.warpgroups > 1 and any(isinstance(s, ir.Turn) for s in walk_stmts(r.body)):
                if r.warpgroups > TURN_IDS:
                    raise error("turn", f"turns take one named barrier per warpgroup: at most {TURN_IDS} "
                                "warpgroups in the role", r.span)
                self.line(f"// turns: warpgroup w syncs on named barrier {TURN_BASE} + w, warpgroup w - 1 arrives "
                          f"on it; the last one opens the first turn")
                self.line(f"if ((ag_rtid >> 7) == {r.warpgroups - 1}) ag_bar_arrive({TURN_BASE}, 256);")
            self.role_index += 1
            scope = Scope(r.warpgroups * 128, "ag_rtid", self.role_index, single_thread_role(r), parent=self.scope)
            if scope.single:
                self.line("// this role only issues bulk copies and mbarrier operations: its first thread runs it")
                self.open("if (ag_rtid == 0)")
                self.block_scope(r.body, scope)
                self.close()
            else:
                self.block_scope(r.body, scope)
            base += r.warpgroups
        self.close()
        self.close()

    # ---- statements -------------------------------------------------------------------------------
    def stmt(self, s: ir.Stmt) -> None:
        self.at(s.span)
        lag = self.lag[0] if self.lag else None
        if self.hold_var is not None and isinstance(s, ir.Arrive) and s.barrier.name == self.hold.empty and \
                self.pending:
            if self.held is not None:
                self.fire_held(force=True)
            self.line(f"{self.hold_var} = {self.mbar_addr(s.barrier, s.span)}; {self.hold_var}_on = true;  "
                      "// released once the wgmmas issued before it are done (codegen/held_release.py)")
            self.held = held_release.Held(self.hold_var, s, frozenset(self.pending), tuple(self.if_stack))
            return
        if self.held is not None and held_release.blocks_release(s):
            self.fire_held(force=True)
        if self.pending:
            need = self._wgmma_needs(s)
            if lag and s is lag.arrive:
                need = set()  # recorded, performed after the next step's wgmmas (release_lag.py)
            elif lag and id(s) in lag.mmas and need is not None:
                need = need - {self.local(s.name)}  # chains on its own accumulator in flight
            if need is None or need:
                self.flush_wgmma(need)
        if lag and s is lag.arrive:
            var = self.lag[1]
            self.line(f"{var} = {self.mbar_addr(s.barrier, s.span)}; {var}_on = true;  "
                      "// released after the next step's wgmmas are issued")
        elif isinstance(s, ir.Let):
            self.let(s)
            if lag and id(s) == lag.last_mma:
                var = self.lag[1]
                self.open(f"if ({var}_on)")
                self.line(f"ag_wgmma_wait<{lag.groups}>();  // the previous step's wgmmas are done: release its stage")
                self.arrive(lag.arrive, bar=var)
                self.close()
        elif isinstance(s, ir.AllocShared):
            b = self.buffers[s.name]
            sw = f", {s.swizzle}B swizzle" if s.swizzle else ""
            self.line(f"// shared {s.name}: {s.dtype}[{', '.join(map(str, s.shape))}]{sw} at +{b.offset} B")
        elif isinstance(s, ir.AllocBarrier):
            self.alloc_barrier_init(s)
        elif isinstance(s, ir.Copy):
            memory.copy(self, s)
        elif isinstance(s, ir.Commit):
            self.features.add("cp.async")
            self.line("ag_cp_async_commit();")
        elif isinstance(s, ir.WaitGroup):
            self.features.add("cp.async")
            self.line(f"ag_cp_async_wait<{s.n}>();")
        elif isinstance(s, ir.Barrier):
            self.barrier()
        elif isinstance(s, ir.Turn):
            self.turn(s)
        elif isinstance(s, ir.Arrive):
            self.arrive(s)
        elif isinstance(s, ir.ExpectTx):
            bar = self.mbar_addr(s.barrier, s.span)
            self.single(f"ag_mbar_expect_tx({bar}, (ag_u32)({self.sx(s.nbytes)}));")
        elif isinstance(s, ir.WaitBarrier):
            bar = self.mbar_addr(s.barrier, s.span)
            self.line(f"ag_mbar_wait({bar}, (ag_u32)({self.sx(s.phase)}) & 1u);")
        elif isinstance(s, ir.Store):
            per_chunk = bulk_store_mod.chunks(self, s)
            if per_chunk is not None:
                bulk_store_mod.emit(self, s, per_chunk)
            else:
                memory.store(self, s)
        elif isinstance(s, ir.AtomicAdd):
            atomics.atomic_add(self, s)
        elif isinstance(s, ir.For):
            self.for_loop(s)
        elif isinstance(s, ir.If):
            entry, defs = dict(self.pending), dict(self.index_def)
            self.scratch_forget()
            self.open(f"if ({self.sx(s.cond)})")
            self.if_stack.append(id(s))
            self.stmts(s.then)
            self.scratch_forget()
            after_then, self.pending = self.pending, dict(entry)
            then_defs, self.index_def = self.index_def, dict(defs)
            if s.orelse:
                self.depth -= 1
                self.open("} else")
                self.if_stack[-1] = -id(s)
                self.stmts(s.orelse)
                self.scratch_forget()
            self.if_stack.pop()
            self.close()
            after_else = self.pending
            self.pending = {**after_else, **after_then}
            merged = list(self.pending)
            if any([n for n in merged if n in branch] != list(branch) for branch in (after_then, after_else)):
                # the branches committed in different orders: no single wait_group count is right for
                # both paths, so wait for everything here
                self.flush_wgmma()
            if isinstance(s.cond, ir.Const):  # a compile-time branch: its index tiles are the ones in force
                self.index_def = then_defs if s.cond.value else self.index_def
            else:
                self._index_defs_merge(then_defs)
        elif isinstance(s, ir.AssertTag):
            self.line("// assert_tag: a data-flow invariant, proved by argus check (no run-time code)")
        elif isinstance(s, ir.Assume):
            if getattr(s, "over", None) is not None or any(isinstance(x, (ir.Load, ir.Lambda))
                                                           for x in sub_exprs(s.cond)):
                # a contract on tensor contents (routing metadata): the interpreter checks it, the
                # verifier assumes it; the GPU code neither checks it nor reads memory for it
                self.line("// assume (on tensor contents): checked by the interpreter, not on the GPU")
            else:
                self.line("// assume: a precondition, checked by the runtime before the launch")
                self.line(f"__builtin_assume({self.sx(s.cond)});")
        elif isinstance(s, ir.Role):
            self.roles((s,))
        else:
            raise unsupported(type(s).__name__, s.span)

    def _check_index_order(self, s: ir.For) -> None:
        """An index tile is inlined where read, with the definition emitted last: in a loop that
        redefines it, every read must follow the redefinition (else it would see the previous trip's)."""
        defined = {x.name for x in walk_stmts(s.body) if isinstance(x, ir.Let) and x.layout is not None
                   and x.layout.kind == "index"}
        seen: set[str] = set()
        for x in walk_stmts(s.body):
            if isinstance(x, ir.AssertTag):
                continue
            for e in _stmt_exprs(x):
                if isinstance(e, ir.Var) and e.name in defined and e.name not in seen:
                    raise unsupported(f"index tile '{e.name}' read in a loop before the loop redefines it", x.span)
            if isinstance(x, ir.Let) and x.name in defined:
                seen.add(x.name)

    def _index_defs_merge(self, other: dict[str, ir.Expr]) -> None:
        """After a branch or a loop: an index tile whose definition in force depends on the path
        taken (or the trip count) cannot be inlined; reading it is refused."""
        for name in set(other) | set(self.index_def):
            if other.get(name) is not self.index_def.get(name):
                self.index_def.pop(name, None)
                self.index_ambiguous.add(name)

    def for_loop(self, s: ir.For) -> None:
        self._check_index_order(s)
        defs = dict(self.index_def)
        self.loop_depth += 1
        try:
            self._for_loop(s)
        finally:
            self.loop_depth -= 1
        self._index_defs_merge(defs)

    def _for_loop(self, s: ir.For) -> None:
        v = self.local(s.var)
        if isinstance(s.step, ir.Const) and isinstance(s.step.value, int) and s.step.value != 0:
            step = s.step.value
            cmp = "<" if step > 0 else ">"
            inc = f"++{v}" if step == 1 else f"{v} += {step}"
        elif s.kind == "persistent":  # the step is the grid size: positive
            cmp, inc = "<", f"{v} += {self.sx(s.step)}"
        else:
            raise unsupported("a loop step that is not a non-zero constant", s.span)
        lag, outer = self.lags.get(id(s)), self.lag
        if lag is not None:
            var = self.tmp("rel")
            self.line(f"ag_u32 {var} = 0u; bool {var}_on = false;  // a stage release deferred by one step "
                      "(codegen/release_lag.py)")
        hold = self.hold is not None and self.hold.step == id(s)
        if hold:
            hold_var = self.tmp("held")
            self.line(f"ag_u32 {hold_var} = 0u; bool {hold_var}_on = false;  // a stage release held until the "
                      "wgmmas before it are done (codegen/held_release.py)")
        body, first = s.body, self.sx(s.start)
        peeled = held_release.peel(s) if hold else None
        if peeled is not None:
            self.open(f"if ({first} < {self.sx(s.stop)})")
            self.line(f"const int {v} = {first};  // the first step apart: its `if` on the step index is false "
                      "(codegen/held_release.py)")
            self.hold_var, self.defer_reg_a = hold_var, True
            self.scratch_forget()
            try:
                self.stmts(peeled[0])
                if self.held is not None:
                    self.fire_held(force=True)
            finally:
                self.hold_var, self.defer_reg_a = None, False
            self.scratch_forget()
            self.close()
            body, first = peeled[1], str(peeled[2])
        start, last_line, entry = len(self.lines), self.last_line, dict(self.pending)

        def emit() -> None:
            if s.kind == "unroll":
                self.line("#pragma unroll")
            elif s.kind == "persistent":
                self.line("// persistent: this block takes every num_blocks-th tile")
            self.open(f"for (int {v} = {first}; {v} {cmp} {self.sx(s.stop)}; {inc})")
            self.lag = (lag, var) if lag is not None else None
            if hold:
                self.hold_var, self.defer_reg_a = hold_var, True
            self.scratch_forget()
            try:
                self.stmts(body)
                if self.held is not None:  # at the latest at the end of the step
                    self.fire_held(force=True)
            finally:
                self.lag = outer
                if hold:
                    self.hold_var, self.defer_reg_a = None, False
            self.scratch_forget()
            self.close()

        emit()
        if any(name not in entry for name in self.pending):
            # a wgmma left in flight at the end of the body is in flight at its start: emit it again
            # knowing that, so its first unsafe statement waits (a no-op in the first iteration)
            back = {**entry, **self.pending}
            del self.lines[start:]
            self.last_line, self.pending = last_line, dict(back)
            emit()
        self.pending = {**entry, **self.pending}
        if lag is not None:  # the last step's release
            self.flush_wgmma()
            self.open(f"if ({var}_on)")
            self.arrive(lag.arrive, bar=var)
            self.close()

    def single(self, text: str) -> None:
        """A statement one thread of the scope performs for all of it."""
        if self.scope.single:
            self.line(text)
        else:
            self.line(f"if ({self.scope.tid} == 0) {text}")

    def scratch(self, nbytes: int, span: Span | None) -> str:
        """C name of a region of the current scope's shared scratch (`unsigned char*`), at least `nbytes`
        long, that no thread is still reading: the caller writes it, calls sync_scope(), then reads it.
        Emits a barrier first only when both regions may still be read."""
        if self.scope.single:
            raise unsupported("a reduction or layout conversion across threads in a one-thread role", span)
        key = self.scope.bar_id
        self.scratch_need[key] = max(self.scratch_need.get(key, 0), nbytes)
        dirty = self.scratch_dirty.get(key, {0, 1} if self.scratch_unknown else set())
        region = next((r for r in (0, 1) if r not in dirty), None)
        if region is None:
            self.sync_scope()
            region = 0
        self.scratch_claim = (key, region)
        if region:
            self.scratch_two.add(key)
        return f"ag_scratch{key}" + ("_1" if region else "")

    def scratch_forget(self) -> None:
        """Control flow joins here (a loop body's entry or exit, a branch): every region may be read."""
        self.scratch_dirty.clear()
        self.scratch_unknown = True
        self.scratch_claim = None

    def sync_scope(self) -> None:
        """A barrier of the scope's threads (no proxy fence: the scratch is only read by threads). Every
        earlier read of the scope's scratch is done; a region written just before is read after it."""
        if self.in_turn is not None and self.scope.threads > 128:
            raise error("turn", "this needs a barrier of the whole role (a reduction or layout change through "
                        "shared scratch, an arrive counted once per role, or barrier()), which inside a turn "
                        "never completes: the role's other warpgroups wait for their turn", self.here,
                        "move it out of the turn")
        if self.scope.bar_id == 0:
            self.line("__syncthreads();")
        else:
            self.line(f"ag_bar_sync({self.scope.bar_id}, {self.scope.threads});")
        key = self.scope.bar_id
        self.scratch_dirty[key] = set()
        if self.scratch_claim is not None and self.scratch_claim[0] == key:
            self.scratch_dirty[key].add(self.scratch_claim[1])
            self.scratch_claim = None

    def turn(self, s: ir.Turn) -> None:
        """A turn's edge (ir.Turn): warpgroup w waits for warpgroup w - 1 to end its turn, and ends its own
        by letting w + 1 go. One warpgroup: nothing to order."""
        if self.scope.single:
            raise error("turn", "a turn in a role that runs on one thread", s.span)
        groups = self.scope.threads // 128
        if s.edge == "begin":
            self.in_turn = s
            if groups > 1:
                self.line(f"ag_bar_sync({TURN_BASE} + (ag_rtid >> 7), 256);  // my turn")
        else:
            self.in_turn = None
            if groups > 1:
                self.line(f"ag_bar_arrive({TURN_BASE} + ((ag_rtid >> 7) + 1) % {groups}, 256);  // the next one's turn")

    def barrier(self) -> None:
        if self.scope.single:
            raise unsupported("barrier() in a role that runs on one thread", None)
        if self.uses_wgmma:
            # wgmma reads shared memory through the async proxy: publish generic-proxy writes first
            self.features.add("proxy-fence")
            self.line("ag_fence_proxy_async();")
        self.sync_scope()

    def alloc_barrier_init(self, s: ir.AllocBarrier) -> None:
        mb = self.mbars[s.name]
        self.line(f"// mbarrier {s.name}[{mb.n}] at +{mb.offset} B: {mb.count} arrival(s) per phase"
                  + (f" x {mb.scale} warps" if mb.scale > 1 else ""))
        self.open("if (ag_tid == 0)")
        self.line(f"for (int ag_i = 0; ag_i < {mb.n}; ++ag_i) ag_mbar_init(ag_smem + {mb.offset}u + 8u * ag_i, "
                  f"{mb.count * mb.scale}u);")
        self.line("ag_fence_mbar_init();")
        self.close()
        self.line("__syncthreads();")

    def mbar_addr(self, b: ir.BarrierRef, span: Span | None) -> str:
        mb = self.mbars.get(b.name)
        if mb is None:
            raise unsupported(f"mbarrier '{b.name}' used before it is allocated", span)
        if b.index is None:
            return f"(ag_smem + {mb.offset}u)"
        return f"(ag_smem + {mb.offset}u + 8u * (ag_u32)({self.sx(b.index)}))"

    def arrive(self, s: ir.Arrive, bar: str | None = None) -> None:
        mb = self.mbars[s.barrier.name]
        bar = bar or self.mbar_addr(s.barrier, s.span)
        if self.scope.single:
            self.line(f"ag_mbar_arrive({bar});")
        elif mb.scale > 1:
            self.line("__syncwarp();")
            self.line(f"if ((ag_tid & 31) == 0) ag_mbar_arrive({bar});  // one arrival per warp")
        else:
            self.barrier()
            self.line(f"if ({self.scope.tid} == 0) ag_mbar_arrive({bar});")

    def _plan_index(self, s: ir.Let) -> list[tuple[str, ir.Expr]]:
        """An index tile's definition with each scalar part replaced by a snapshot local (so a later
        read sees the values of the definition's time); returns the snapshots (name, scalar part)."""
        snaps: list[tuple[str, ir.Expr]] = []

        def cut(e):
            if not isinstance(e, ir.Expr):
                return e
            if not isinstance(e.type, TileT):
                if isinstance(e, ir.Const):
                    return e
                name = self.tmp("ix")
                self.cname[name] = name
                snaps.append((name, e))
                return ir.Var(e.type, e.span, name)
            changes = {}
            for f in dataclasses.fields(e):
                if f.name in ("span", "type"):
                    continue
                v = getattr(e, f.name)
                nv = tuple(cut(x) for x in v) if isinstance(v, tuple) else cut(v)
                if nv is not v:
                    changes[f.name] = nv
            return dataclasses.replace(e, **changes) if changes else e

        self.index_plan[id(s)] = (cut(_gather_scalar_terms(s.value)), snaps)
        return snaps

    def _index_let(self, s: ir.Let) -> None:
        expr, snaps = self.index_plan[id(s)]
        self.line(f"// index tile {s.name}: evaluated where it is read, from (thread, slot) coordinates")
        for name, sub in snaps:
            self.line(f"{name} = {self.sx(sub)};")

        def resolve(e):  # earlier index tiles, as defined now
            if isinstance(e, ir.Var) and isinstance(e.type, TileT):
                lay = self.scope.layout(e.name)
                if lay is None or lay.kind != "index" or e.name not in self.index_def:
                    raise unsupported(f"index tile '{s.name}' reading '{e.name}'", s.span)
                return self.index_def[e.name]
            return None
        self.index_def[s.name] = rewrite(expr, resolve)
        self.index_ambiguous.discard(s.name)

    def let(self, s: ir.Let) -> None:
        t = s.value.type
        name = self.local(s.name)
        if isinstance(t, TileT) and s.layout is not None and s.layout.kind == "index":
            self._index_let(s)
            return
        if isinstance(t, TileT):
            self.tile_assign(name, s.value, s.layout, s.span)
            return
        if not isinstance(t, ScalarT):
            raise unsupported(f"a {t} value", s.span)
        value = self.sx(s.value)
        if is_narrow_float(t.dtype):
            value = to_compute(t.dtype, from_compute(t.dtype, value))
        self.line(f"{name} = {value};")

    # ---- register tiles ---------------------------------------------------------------------------
    def tilemap(self, lay: ir.RegLayout) -> TileMap:
        return TileMap(lay, self.scope.tid)

    def default_layout(self, shape: tuple[int, ...], nbytes: int) -> ir.RegLayout:
        return blocked_reg_layout(shape, self.scope.threads, nbytes)

    def tile_assign(self, name: str, value: ir.Expr, lay: ir.RegLayout | None, span) -> None:
        if lay is None:
            raise unsupported("this register tile: it would need two different layouts", span)
        tm = self.tilemap(lay)
        inner = value
        while isinstance(inner, ir.Tag):
            inner = inner.x
        if isinstance(inner, ir.Mma):
            mma.emit(self, name, inner, tm)
            return
        if isinstance(inner, ir.Load):
            memory.load_into(self, name, inner, tm)
            return
        loads = self.preload(value, tm)
        dt = value.type.dtype

        def slot_loop(v: ir.Expr) -> None:
            self.line("#pragma unroll")
            self.line(f"for (int ag_i = 0; ag_i < {tm.slots}; ++ag_i) "
                      f"{name}[ag_i] = {from_compute(dt, self.ex(v, 'ag_i', tm, loads, top=True))};")

        uniform = self.all_true(inner.cond) if isinstance(inner, ir.Select) and self.uniform_select else None
        if uniform is None:
            slot_loop(value)
            return
        # select(cond, a, b) with an index-tile condition (key / query positions): when the condition holds
        # over the whole tile (a block-uniform bound test, e.g. a kv block wholly before SKV or below the
        # causal diagonal), the result is `a`; only boundary tiles pay the per-element compare and select.
        self.line(f"// select: per element only where {uniform} fails (a boundary tile)")
        same = isinstance(inner.a, ir.Var) and self.local(inner.a.name) == name and \
            self.scope.layout(inner.a.name) == lay
        if same:
            self.open(f"if (!{uniform})")
            slot_loop(value)
            self.close()
            return
        self.open(f"if ({uniform})")
        slot_loop(inner.a)
        self.close()
        self.open("else")
        slot_loop(value)
        self.close()

def _gather_scalar_terms(e: ir.Expr) -> ir.Expr:
    """An integer sum of tiles and scalars with its scalar terms added first (one snapshot, one
    register): qb * BQ + arange(BQ) + (SKV - SQ) -> arange(BQ) + (qb * BQ + (SKV - SQ))."""
    while isinstance(e, ir.Tag):
        e = e.x
    if not (isinstance(e, ir.Bin) and e.op == "+" and not e.type.dtype.is_float):
        return e
    terms: list[ir.Expr] = []

    def flat(x: ir.Expr) -> None:
        if isinstance(x, ir.Bin) and x.op == "+" and isinstance(x.type, TileT) and not x.type.dtype.is_float:
            flat(x.a)
            flat(x.b)
        else:
            terms.append(x)
    flat(e)
    scal = [t for t in terms if not isinstance(t.type, TileT)]
    tiles = [t for t in terms if isinstance(t.type, TileT)]
    if len(scal) < 2:
        return e
    acc_s = scal[0]
    for t in scal[1:]:
        acc_s = ir.Bin(acc_s.type, e.span, "+", acc_s, t)
    out = tiles[0]
    for t in [*tiles[1:], acc_s]:
        out = ir.Bin(e.type, e.span, "+", out, t)
    return out


def _stmt_exprs(s: ir.Stmt):
    for f in s.__dataclass_fields__:
        if f in ("span", "body", "then", "orelse"):
            continue
        v = getattr(s, f)
        yield from sub_exprs(v)


def _refuse_high_rank_tiles(kernel: ir.Kernel) -> None:
    """Register layouts (argus/ir/reg_layout.py) distribute tiles of one or two axes over the threads; a
    register tile of more axes is refused at the first expression that makes one (shared buffers and
    global views of any rank are fine: only values held in registers are limited)."""
    for s in walk_stmts(kernel.body):
        for e in _stmt_exprs(s):
            t = e.type
            if isinstance(t, TileT) and t.space == "reg" and len(t.shape) > 2:
                raise unsupported(
                    f"a register tile of {len(t.shape)} axes ({t})", e.span if e.span is not None else s.span,
                    "register tiles have one or two axes: index the leading axes (X[b, r0 : +BM, c0 : +BN]) and "
                    "loop over them, or give each its own block (a grid axis)")


class StagingTooBig(Exception):
    """The TMA-store staging buffers would push the block past its shared memory."""


def generate(kernel: ir.Kernel, path: str | None = None, *, defer_wgmma: bool | None = None,
             blocks_per_sm: int | None = None, uniform_select: bool = True,
             bulk_store: bool | None = None, release_lag: bool | None = None) -> GeneratedKernel:
    """CUDA C++ for a lowered kernel (after the pass pipeline); raises ArgusError on what it cannot emit.

    defer_wgmma: wait for each wgmma group only when the next statement needs it, so that it overlaps
    the following cp.async wait (default: $ARGUS_WGMMA_WAIT, else DEFER_DEFAULT). blocks_per_sm: the
    minimum blocks per multiprocessor promised in __launch_bounds__ (caps registers at
    65536 / (threads x blocks)); None: two when their shared memory fits (one with roles). uniform_select:
    guard a select() on an index-tile condition with a block-uniform bound test (Emitter.tile_assign).
    bulk_store: lower accumulator stores of warp-specialised roles to TMA stores through shared memory
    where exact (argus/codegen/bulk_store.py; default: $ARGUS_STORE != "direct"); falls back to direct
    stores when the staging buffers do not fit. release_lag: release a ring consumer's stage one step
    late, keeping one step's wgmmas in flight (argus/codegen/release_lag.py; default: $ARGUS_RELEASE_LAG
    != "off")."""
    _refuse_high_rank_tiles(kernel)
    try:
        return Emitter(kernel, path, defer_wgmma=defer_wgmma, blocks_per_sm=blocks_per_sm,
                       uniform_select=uniform_select, bulk_store=bulk_store, release_lag=release_lag).generate()
    except StagingTooBig:  # the staging buffers do not fit beside the kernel's own: store directly
        return Emitter(kernel, path, defer_wgmma=defer_wgmma, blocks_per_sm=blocks_per_sm,
                       uniform_select=uniform_select, bulk_store=False, release_lag=release_lag).generate()
