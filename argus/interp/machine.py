"""The NumPy interpreter: executes the IR the way the GPU does, one block at a time.

Faithful where it matters for correctness:
- the grid of blocks, each with its own shared memory, filled with NaN at launch so that reading a
  buffer before data landed in it gives NaN (deterministically wrong), never the right answer;
- threads of a block are vectorised: tile operations act for all threads at once, and hardware
  indices (thread_id, warp_id, ...) evaluate to one value per thread;
- cp.async copies read their source when issued but land in shared memory only when a
  `wait_group` retires their commit group; bulk (TMA) copies land when their mbarrier phase completes;
- out-of-bounds elements of a masked access read as zero / are not written; an unmasked
  out-of-bounds access, or an index outside a shared buffer, stops with an error naming the block,
  the thread and the element;
- warp-specialised roles run as coroutines that switch at mbarrier waits; if every role is blocked,
  the interpreter reports a deadlock.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from argus.dsl.diagnostics import ArgusError, Diagnostic, Span
from argus.dsl.types import ScalarT, TileT
from argus.interp.hazards import ObservedHazard, Shadow
from argus.interp.numerics import round_to, storage_dtype
from argus.ir import nodes as ir
from argus.ir.smem_layout import offsets as smem_offsets
from argus.ir.threads import MULTI, NONE, Holders, copy_thread
from argus.ir.transform import role_groups


class InterpError(ArgusError):
    """A runtime fault found by the interpreter (out of bounds, deadlock, ...)."""

    def __init__(self, code: str, message: str, span: Span | None, *notes: str, details: dict | None = None):
        super().__init__(Diagnostic("error", code, message, span, tuple(notes)))
        self.details = details or {}


@dataclass
class _Mbarrier:
    """An mbarrier phase completes when `count` arrivals happened and every expected byte was issued."""

    count: int
    arrivals: int = 0
    tx_expected: int = 0
    tx_issued: int = 0
    completed: int = 0  # completed phases; the current phase's parity is completed % 2
    pending: list = field(default_factory=list)  # bulk copies of the current phase
    ready: list = field(default_factory=list)  # copies of completed phases, landing at the next wait

    def maybe_complete(self) -> None:
        if self.arrivals >= self.count and self.tx_issued >= self.tx_expected:
            self.ready.extend(self.pending)
            self.pending.clear()
            self.arrivals = self.tx_expected = self.tx_issued = 0
            self.completed += 1


@dataclass
class _Copy:
    buffer: str
    index: tuple  # NumPy index into the shared buffer
    data: np.ndarray
    span: Span | None
    writers: np.ndarray | int = NONE  # thread of each element (buffer order), for the shadow memory
    asynchronous: bool = False


class _Blocked(Exception):
    pass


class BlockMachine:
    """Executes the kernel body for one block."""

    def __init__(self, kernel: ir.Kernel, globals_: dict[str, np.ndarray], dims: dict[str, int],
                 scalars: dict[str, float], block: tuple[int, int, int], grid: tuple[int, int, int],
                 shadow: Shadow | None = None):
        self.k = kernel
        self.g = globals_
        self.block = block
        self.grid = grid
        self.env: dict[str, object] = {**dims, **scalars}
        self.shared: dict[str, np.ndarray] = {}
        self.shared_types: dict[str, ir.AllocShared] = {}
        self.mbar: dict[str, list[_Mbarrier]] = {}
        self.uncommitted: list[_Copy] = []
        self.groups: list[list[_Copy]] = []
        self.threads = kernel.threads
        self.epoch = 0  # barrier count, for diagnostics
        self.progress = 0  # statements executed; unchanged over a round of roles means deadlock
        # Shadow memory observes races and async hazards (replay of the verifier's counterexamples).
        # Inside warp-specialised roles ordering comes from mbarriers, not barrier epochs, so only
        # in-flight reads are tracked there.
        self.shadow = shadow
        self.store_counts: dict[str, np.ndarray] | None = None  # writes per output element (shared by blocks)
        self.physical: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.in_roles = False
        self.role_accesses = 0
        self.reading_layout: ir.RegLayout | None = None
        self.role = "the block"  # who runs now (a role's kind), for the deadlock message
        self.waits: dict[str, tuple[Span | None, str]] = {}  # role -> (span, what it waits for), while blocked

    # ---- driver ----
    def run(self) -> None:
        gen = self.exec_block(self.k.body)
        for _ in gen:
            # every role is blocked: say where each one waits (the first one's line is the error's)
            waits = list(self.waits.values())
            raise InterpError("deadlock", "the block waits on an mbarrier that nothing will complete",
                              waits[0][0] if waits else None, f"block {self.block}", *[w[1] for w in waits])

    # ---- statements (generators: they yield when blocked on an mbarrier) ----
    def exec_block(self, stmts: tuple[ir.Stmt, ...]) -> Iterator[None]:
        for item in role_groups(stmts):
            if isinstance(item, tuple):
                yield from self.exec_roles(item)
            else:
                yield from self.exec_stmt(item)

    def exec_roles(self, roles: tuple[ir.Role, ...]) -> Iterator[None]:
        """Run warp-specialised roles as coroutines; each yields when blocked on an mbarrier.

        Each role has its own threads and its own locals (registers are per thread); shared memory
        and mbarriers are the block's.
        """
        saved_threads, saved_env = self.threads, self.env
        self.in_roles = True
        live = [[r, self.exec_block(r.body), dict(saved_env)] for r in roles]
        while live:
            before = self.progress
            for item in list(live):
                r, gen, env = item
                self.threads, self.env = r.warpgroups * 128, env
                self.role = f"role '{r.kind}'"
                try:
                    next(gen)
                except StopIteration:
                    live.remove(item)
            self.threads, self.env = saved_threads, saved_env
            self.role = "the block"
            if live and self.progress == before:
                yield  # every role is blocked: only an enclosing role could unblock them
        self.in_roles = False

    def exec_stmt(self, s: ir.Stmt) -> Iterator[None]:
        self.progress += 1
        if isinstance(s, ir.Let):
            self.reading_layout = s.layout  # shared memory read into this tile: by the threads holding it
            try:
                self.env[s.name] = self.eval(s.value)
            finally:
                self.reading_layout = None
        elif isinstance(s, ir.AllocShared):
            self.shared[s.name] = np.full(s.shape, np.nan if s.dtype.is_float else 0, storage_dtype(s.dtype))
            self.shared_types[s.name] = s
            if s.layout is not None:
                # an explicit layout is stored physically: elements mapped to one offset alias each other
                offs = smem_offsets(s.layout, s.shape)
                self.physical[s.name] = (offs, np.full(int(offs.max()) + 1, np.nan if s.dtype.is_float else 0,
                                                       storage_dtype(s.dtype)))
            if self.shadow is not None:
                self.shadow.alloc(s.name, s.shape)
        elif isinstance(s, ir.AllocBarrier):
            self.mbar[s.name] = [_Mbarrier(s.count) for _ in range(s.n or 1)]
        elif isinstance(s, ir.Copy):
            self.copy(s)
        elif isinstance(s, ir.Commit):
            self.groups.append(self.uncommitted)
            self.uncommitted = []
        elif isinstance(s, ir.WaitGroup):
            keep = s.n
            land = self.groups[:-keep] if keep else self.groups
            for grp in land:
                for cp in grp:
                    self.land(cp)
            self.groups = self.groups[-keep:] if keep else []
        elif isinstance(s, ir.Barrier):
            self.epoch += 1
        elif isinstance(s, ir.Store):
            self.store(s)
        elif isinstance(s, ir.AtomicAdd):
            self.atomic_add(s)
        elif isinstance(s, ir.For):
            start, stop, step = (int(self.scalar(x)) for x in (s.start, s.stop, s.step))
            for v in range(start, stop, step):
                self.env[s.var] = v
                yield from self.exec_block(s.body)
        elif isinstance(s, ir.If):
            c = self.scalar(s.cond)
            yield from self.exec_block(s.then if c else s.orelse)
        elif isinstance(s, ir.Assume) and s.over is not None:
            lam = s.cond
            p = lam.params[0]
            saved = self.env.get(p, None)
            n = int(self.scalar(s.over))
            try:
                for i in range(n):
                    self.env[p] = i
                    if not self.scalar(lam.body):
                        vals = self._assume_values(lam.body)
                        raise InterpError("precondition", f"the kernel's assume(lambda {p}: ..., over={n}) does not "
                                          f"hold for {p} = {i}", s.span,
                                          f"block {self.block[:len(self.k.grid)]}: " + ", ".join(vals),
                                          "the kernel was written for inputs that satisfy it: pass integer "
                                          "tensors that do (`argus run` solves them from the assumes, or the "
                                          "kernel names a builder: launch ..., metadata=\"moe_routing\")",
                                          details={"block": self.block, "values": vals})
            finally:
                if saved is None:
                    self.env.pop(p, None)
                else:
                    self.env[p] = saved
        elif isinstance(s, ir.Assume):
            if not self.scalar(s.cond):
                vals = self._assume_values(s.cond)
                raise InterpError("precondition", "the kernel's assume(...) does not hold for these inputs", s.span,
                                  f"block {self.block[:len(self.k.grid)]}: " + (", ".join(vals) or "no runtime values"),
                                  "the kernel was written for inputs that satisfy it; pick other dims or pad, "
                                  "pass integer tensors that satisfy it (`argus run` solves them from the "
                                  "assumes, or the kernel names a builder: launch ..., metadata=\"moe_routing\")",
                                  details={"block": self.block, "values": vals})
        elif isinstance(s, ir.AssertTag):
            pass  # tag relations are proved statically by argus.analysis, not checked at run time
        elif isinstance(s, ir.Turn):
            pass  # a turn orders the role's warpgroups on the GPU; it moves no data (ir.Turn)
        elif isinstance(s, ir.Arrive):
            mb = self.barrier(s.barrier, s.span)
            mb.arrivals += 1
            mb.maybe_complete()
            if self.in_roles:
                yield  # switch roles at every release: the waiter runs as early as the GPU may let it
        elif isinstance(s, ir.ExpectTx):
            mb = self.barrier(s.barrier, s.span)
            mb.tx_expected += int(self.scalar(s.nbytes))
            mb.arrivals += 1
            mb.maybe_complete()
        elif isinstance(s, ir.WaitBarrier):
            mb = self.barrier(s.barrier, s.span)
            parity = int(self.scalar(s.phase)) & 1
            who = self.role
            while mb.completed % 2 == parity:  # the phase of this parity has not completed yet
                idx = "" if s.barrier.index is None else f"[{int(self.scalar(s.barrier.index))}]"
                line = f" (line {s.span.line})" if s.span is not None else ""
                self.waits[who] = (s.span, f"{who} waits on {s.barrier.name}{idx} for parity {parity}{line}: "
                                   f"{mb.completed} phase(s) completed, {mb.arrivals} of {mb.count} arrival(s) "
                                   f"and {mb.tx_issued} of {mb.tx_expected} bytes in the current one")
                yield
            self.waits.pop(who, None)
            # Bulk copies become visible to the waiter: data is never there before a wait observes it.
            for cp in mb.ready:
                self.land(cp)
            mb.ready.clear()
        elif isinstance(s, ir.PipelineFor):
            raise InterpError("internal", "pipeline loop was not expanded", s.span)
        else:
            raise InterpError("unsupported", f"the interpreter cannot execute {type(s).__name__}", s.span)

    def _assume_values(self, cond: ir.Expr) -> list[str]:
        """The runtime values an assume mentions (names and scalar loads), for its error message."""
        from argus.ir.printer import expr as show
        from argus.ir.transform import walk

        out, seen = [], set()
        for x in walk(cond):
            if isinstance(x, (ir.Var, ir.Load)) and isinstance(x.type, ScalarT):
                text = show(x)
                if text in seen:
                    continue
                seen.add(text)
                try:
                    out.append(f"{text} = {self.eval(x)}")
                except ArgusError:
                    continue
        return out

    def barrier(self, b: ir.BarrierRef, span) -> _Mbarrier:
        bars = self.mbar[b.name]
        i = 0 if b.index is None else int(self.scalar(b.index))
        if not 0 <= i < len(bars):
            raise InterpError("out-of-bounds", f"mbarrier index {i} is outside {b.name}[0:{len(bars)}]", span,
                              f"block {self.block}")
        return bars[i]

    # ---- memory ----
    def resolve(self, r: ir.Ref, span: Span | None, *, masked: bool, for_write: bool = False):
        """Concrete view of a Ref: (array, numpy index for the in-bounds part, tile shape, tile index)."""
        starts = [int(self.scalar(s)) for s in r.starts]
        arr = self.g[r.base] if r.space == "global" else self.shared[r.base]
        src_idx, dst_idx, shape = [], [], []
        for ax, (st, ext) in enumerate(zip(starts, r.extents)):
            size = arr.shape[ax]
            if ext is None:
                if not 0 <= st < size:
                    self._oob(r, span, ax, st, size, starts)
                src_idx.append(st)
                continue
            lo, hi = max(st, 0), min(st + ext, size)
            if (lo != st or hi != st + ext) and (r.space == "shared" or not masked):
                bad = st if lo != st else size
                self._oob(r, span, ax, bad, size, starts)
            src_idx.append(slice(lo, max(lo, hi)))
            dst_idx.append(slice(lo - st, max(lo, hi) - st))
            shape.append(ext)
        return arr, tuple(src_idx), tuple(shape), tuple(dst_idx)

    def _oob(self, r: ir.Ref, span, axis: int, index: int, size: int, starts) -> None:
        # The first offending element of the tile and the thread that would touch it.
        tile_coord = []
        for ax, (st, ext) in enumerate(zip(starts, r.extents)):
            if ext is None:
                continue
            tile_coord.append(index - st if ax == axis else 0)
        kept = [e for e in r.extents if e is not None]
        flat = int(np.ravel_multi_index(tuple(min(c, n - 1) for c, n in zip(tile_coord, kept)), kept)) \
            if kept else 0
        thread = int(copy_thread((flat,), (max(1, flat + 1),), r.dtype.bytes, self.threads))
        where = "global tensor" if r.space == "global" else "shared buffer"
        coords = list(starts)
        coords[axis] = index
        raise InterpError(
            "out-of-bounds", f"out-of-bounds access to {where} '{r.base}': index {index} on axis {axis} "
            f"(size {size})", span or r.span,
            f"block {self.block} | thread {thread} (warp {thread // 32}, lane {thread % 32}) | "
            f"element {r.base}[{', '.join(map(str, coords))}]",
            "mask the access (the default) or keep the tile inside the tensor",
            details={"block": self.block, "thread": thread, "tensor": r.base, "element": coords, "axis": axis})

    def _threads_of(self, r: ir.Ref, shape: tuple[int, ...]) -> np.ndarray:
        """Thread of each element of a copied/loaded tile, in the buffer's axis order."""
        idx = np.indices(shape) if shape else np.zeros((0,), int)
        t = copy_thread(tuple(idx), shape, r.dtype.bytes, self.threads) if shape else np.zeros((), int)
        return np.asarray(t, np.int32)

    def _shadow_on(self) -> bool:
        return self.shadow is not None

    def _holders(self, layout: ir.RegLayout, shape: tuple[int, ...], owner_only: bool) -> np.ndarray:
        """Threads holding each element of a register tile in `layout` (argus.ir.threads.Holders: the
        verifier's and the code generator's distribution)."""
        from argus.ir.reg_layout import fragment_of

        return Holders(fragment_of(layout), len(shape) == 1, owner_only).table(shape)

    def read(self, r: ir.Ref, span, masked: bool, multi: bool = False) -> np.ndarray:
        arr, src, shape, dst = self.resolve(r, span, masked=masked)
        if r.space == "shared" and self._shadow_on():
            view_shape = arr[src].shape
            if multi:
                readers = np.full(view_shape, MULTI, np.int32)
            elif self.reading_layout is not None and tuple(shape) == tuple(self.reading_layout.shape):
                readers = self._holders(self.reading_layout, tuple(shape), False)
                readers = readers.T if r.transposed else readers
                readers = readers.reshape(view_shape)
            else:
                readers = self._threads_of(r, view_shape)
            self.shadow.read(r.base, src, readers, self._epoch(), span)
        if r.space == "global" and any(d.stop - d.start != n for d, n in zip(dst, shape)):
            out = np.zeros(shape, arr.dtype)
            out[dst] = arr[src]
        else:
            out = np.array(arr[src], copy=True)
        return out.T if r.transposed else out

    def copy(self, s: ir.Copy) -> None:
        if isinstance(s.src, ir.Ref):
            data = self.read(s.src, s.span, s.masked)
        else:
            data = np.broadcast_to(self.eval(s.src), s.dst.shape)
        arr, idx, shape, _ = self.resolve(s.dst, s.span, masked=False, for_write=True)
        data = round_to(data, s.dst.dtype)
        if s.dst.transposed:
            data = data.T
        cp = _Copy(s.dst.base, idx, data, s.span, asynchronous=s.mode != "sync")
        if self._shadow_on():
            if not isinstance(s.src, ir.Ref) and s.layout is not None and tuple(s.dst.shape) == tuple(s.layout.shape):
                # a register tile is written by the threads that hold it, first replica only
                w = self._holders(s.layout, tuple(s.dst.shape), True)
                cp.writers = (w.T if s.dst.transposed else w).reshape(arr[idx].shape)
            else:
                cp.writers = self._threads_of(s.dst, arr[idx].shape)
        if s.mode == "sync":
            self.land(cp)
        elif s.mode == "async":
            if self._shadow_on():
                self.shadow.issue_async(cp.buffer, idx, cp.writers, self._epoch(), s.span)
            self.uncommitted.append(cp)
        else:
            mb = self.barrier(s.barrier, s.span)
            if self._shadow_on():
                self.shadow.issue_async(cp.buffer, idx, cp.writers, self._epoch(), s.span)
            mb.pending.append(cp)
            mb.tx_issued += data.size * s.dst.dtype.bytes
            mb.maybe_complete()

    def land(self, cp: _Copy) -> None:
        self.shared[cp.buffer][cp.index] = cp.data
        if cp.buffer in self.physical:
            offs, flat = self.physical[cp.buffer]
            flat[offs[cp.index]] = np.broadcast_to(cp.data, offs[cp.index].shape)
            self.shared[cp.buffer][...] = flat[offs]
        if self._shadow_on():
            self.shadow.write(cp.buffer, cp.index, cp.writers, self._epoch(), cp.span, cp.asynchronous)

    def _epoch(self) -> int:
        # Within roles, barrier epochs do not order accesses (mbarriers do): give every access its own
        # epoch so that only in-flight hazards are reported there.
        if self.in_roles:
            self.role_accesses += 1
            return -1 - self.role_accesses
        return self.epoch

    def _written(self, s: ir.Store | ir.AtomicAdd):
        """The value a store or atomic add writes (shared memory read into it by the threads of its
        layout), and its destination resolved: (value, array, index, tile shape, tile index)."""
        self.reading_layout = s.layout
        try:
            value = self.eval(s.value)
        finally:
            self.reading_layout = None
        return (value, *self.resolve(s.dst, s.span, masked=s.masked, for_write=True))

    def store(self, s: ir.Store) -> None:
        value, arr, src, shape, dst = self._written(s)
        if self.shadow is not None and self.store_counts is not None:
            counts = self.store_counts.setdefault(s.dst.base, np.zeros(arr.shape, np.int32))
        value = np.broadcast_to(round_to(value, s.dst.dtype), shape)
        if s.mask is not None:  # where=: only elements whose mask is true are written
            keep = np.broadcast_to(np.asarray(self.eval(s.mask), dtype=bool), shape)
            if s.dst.transposed:
                keep = keep.T
        if s.dst.transposed:
            value = value.T
        if s.mask is None:
            if self.shadow is not None and self.store_counts is not None:
                counts[src] += 1
            arr[src] = value[dst]
            return
        k = keep[dst]
        if self.shadow is not None and self.store_counts is not None:
            counts[src] += k
        view = arr[src]
        view[k] = value[dst][k]
        arr[src] = view

    def atomic_add(self, s: ir.AtomicAdd) -> None:
        """dst += value where written (masked, where=), rounded to dst's type after the addition as the
        GPU's atomic does; not counted as a write (many adds to one element are the point)."""
        value, arr, src, shape, dst = self._written(s)
        integer = not s.dst.dtype.is_float  # i32: an exact sum that wraps at 32 bits, as atomicAdd(int*)
        value = np.broadcast_to(np.asarray(value, np.int64 if integer else np.float32), shape)
        keep = np.ones(shape, bool) if s.mask is None else np.broadcast_to(np.asarray(self.eval(s.mask), bool), shape)
        if s.dst.transposed:
            value, keep = value.T, keep.T
        view = arr[src]
        k = keep[dst]
        if integer:
            view[k] = (view[k].astype(np.int64) + value[dst][k]).astype(np.uint32).astype(np.int32)
        else:
            view[k] = round_to(view[k].astype(np.float32) + value[dst][k], s.dst.dtype)
        arr[src] = view

    # ---- expressions ----
    def scalar(self, e: ir.Expr):
        v = self.eval(e)
        if isinstance(v, np.ndarray):
            if v.ndim == 1 and v.shape[0] == self.threads and np.all(v == v[0]):
                return v[0].item()
            raise InterpError("unsupported", "this value differs between threads; the interpreter needs it "
                              "uniform here (control flow and tile offsets are per block)", e.span)
        return v

    def eval(self, e: ir.Expr):
        m = getattr(self, "_e_" + type(e).__name__)
        return m(e)

    def _e_Const(self, e: ir.Const):
        return e.value

    def _e_Var(self, e: ir.Var):
        try:
            return self.env[e.name]
        except KeyError:
            raise InterpError("uninitialised", f"'{e.name}' is used before it has a value", e.span) from None

    def _e_Special(self, e: ir.Special):
        t = np.arange(self.threads)
        return {"block_id": lambda: self.block[e.axis], "num_blocks": lambda: self.grid[e.axis],
                "thread_id": lambda: t, "warp_id": lambda: t // 32, "lane_id": lambda: t % 32,
                "warpgroup_id": lambda: t // 128}[e.kind]()

    def _e_Bin(self, e: ir.Bin):
        a, b = self.eval(e.a), self.eval(e.b)
        if e.op in ("//", "%"):
            self._divisor(e, b)
        return _binop(e.op, a, b, e)

    def _divisor(self, e: ir.Expr, b) -> None:
        """Integer division or remainder by zero is undefined behaviour in CUDA (no trap, no defined value):
        stop as the verifier's division-by-zero check reports it."""
        dt = e.type.dtype
        if dt.is_float or not np.any(np.asarray(b) == 0):
            return
        raise InterpError("division-by-zero", "integer division by zero", e.span, f"block {self.block}",
                          "assume the divisor is not zero (assume(n > 0)) or guard the division",
                          details={"block": self.block})

    def _e_Un(self, e: ir.Un):
        a = self.eval(e.a)
        if e.op == "-":
            return -a
        if e.op == "~":
            return ~a
        return not a if not isinstance(a, np.ndarray) else np.logical_not(a)

    def _e_Cmp(self, e: ir.Cmp):
        if e.op in ("and", "or"):
            a = self.scalar(e.a)
            if e.op == "and":
                return bool(a) and bool(self.scalar(e.b))
            return bool(a) or bool(self.scalar(e.b))
        a, b = self.eval(e.a), self.eval(e.b)
        r = {"==": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal, ">": np.greater,
             ">=": np.greater_equal}[e.op](a, b)
        return bool(r) if np.ndim(r) == 0 else r

    def _e_Select(self, e: ir.Select):
        c = self.eval(e.cond)
        if np.ndim(c) == 0:
            return self.eval(e.a) if c else self.eval(e.b)
        out = np.where(c, self.eval(e.a), self.eval(e.b))
        return round_to(out, e.type.dtype) if isinstance(e.type, TileT) else out

    def _e_Math(self, e: ir.Math):
        args = [self.eval(a) for a in e.args]
        fn = e.fn
        if fn == "cast":
            return round_to(args[0], e.type.dtype) if isinstance(e.type, TileT) else \
                (float(args[0]) if e.type.dtype.is_float else int(args[0]))
        if fn == "cdiv":
            self._divisor(e, args[1])
            return -(-args[0] // args[1])
        if fn in ("min", "max"):
            if all(np.ndim(a) == 0 for a in args):
                return min(args) if fn == "min" else max(args)
            out = (np.minimum if fn == "min" else np.maximum)(*args)
            return round_to(out, e.type.dtype)
        f = {"exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "sqrt": np.sqrt,
             "rsqrt": lambda x: 1.0 / np.sqrt(x), "abs": np.abs, "tanh": np.tanh, "erf": erf,
             "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)), "silu": lambda x: x / (1.0 + np.exp(-x)),
             "gelu": lambda x: 0.5 * x * (1.0 + erf(x * np.float32(0.7071067811865476)))}[fn]
        wide = e.type.dtype.is_float and e.type.dtype.bits == 64  # f64 math stays f64 (the GPU calls exp(double))
        with np.errstate(all="ignore"):
            out = f(np.asarray(args[0], dtype=np.float64 if wide else np.float32) if fn != "abs" else args[0])
        if isinstance(e.type, TileT):
            return round_to(out, e.type.dtype)
        return out.item() if isinstance(out, np.ndarray) else out

    def _e_Reduce(self, e: ir.Reduce):
        x = self.eval(e.x)
        f = {"sum": np.sum, "max": np.max, "min": np.min, "argmax": np.argmax}[e.op]
        out = f(x, axis=e.axis)
        return round_to(np.reshape(out, e.type.shape), e.type.dtype)

    def _e_Full(self, e: ir.Full):
        return np.full(e.type.shape, round_to(self.scalar(e.value), e.type.dtype), storage_dtype(e.type.dtype))

    def _e_Arange(self, e: ir.Arange):
        return np.arange(e.type.shape[0], dtype=np.int32)

    def _e_Load(self, e: ir.Load):
        if isinstance(e.type, ScalarT):  # load(T[i, j]): one element, every axis indexed (never masked)
            v = self.read(e.ref, e.span, False)
            return v.item() if isinstance(v, np.ndarray) else v
        return self.read(e.ref, e.span, e.masked)

    def _operand(self, x) -> np.ndarray:
        return self.read(x, x.span, True, multi=True) if isinstance(x, ir.Ref) else self.eval(x)

    def _e_Mma(self, e: ir.Mma):
        a = self._operand(e.a).astype(np.float32)
        b = self._operand(e.b).astype(np.float32)
        acc = self.eval(e.acc)
        with np.errstate(all="ignore"):
            return (acc + a @ b).astype(np.float32)

    def _e_Shfl(self, e: ir.Shfl):
        raise InterpError("unsupported", "shfl_xor is not supported by the interpreter yet", e.span,
                          "use a reduction along an axis (max(x, axis=1)) instead")

    def _e_Reshape(self, e: ir.Reshape):
        return np.reshape(self.eval(e.x), e.type.shape)

    def _e_Transpose(self, e: ir.Transpose):
        return np.ascontiguousarray(self.eval(e.x).T)

    def _e_Tag(self, e: ir.Tag):
        return self.eval(e.x)


def erf(x):
    """The error function elementwise (NumPy has none): math.erf per element, in x's precision."""
    a = np.asarray(x)
    return np.vectorize(math.erf, otypes=[np.float64])(a).astype(a.dtype) if a.ndim else math.erf(float(a))


def _binop(op: str, a, b, e: ir.Expr):
    tile = isinstance(e.type, TileT)
    if op == "//":
        r = np.floor_divide(a, b) if tile else a // b
    elif op == "%":
        r = np.mod(a, b) if tile else a % b
    elif op == "/":
        with np.errstate(all="ignore"):
            r = np.divide(a, b) if tile else a / b
    else:
        with np.errstate(all="ignore"):
            r = {"+": np.add, "-": np.subtract, "*": np.multiply, "**": np.power, "<<": np.left_shift,
                 ">>": np.right_shift, "&": np.bitwise_and, "|": np.bitwise_or, "^": np.bitwise_xor}[op](a, b)
    if tile:
        return round_to(r, e.type.dtype)
    if isinstance(e.type, ScalarT) and not e.type.dtype.is_float and not isinstance(r, np.ndarray):
        return int(r)
    return r.item() if isinstance(r, np.generic) else r


def grid_size(kernel: ir.Kernel, dims: dict[str, int], scalars: dict[str, float]) -> tuple[int, int, int]:
    m = BlockMachine(kernel, {}, dims, scalars, (0, 0, 0), (1, 1, 1))
    g = [int(m.scalar(x)) for x in kernel.grid]
    for v, x in zip(g, kernel.grid):
        if v < 1:
            raise InterpError("launch", f"the grid has {v} blocks along an axis", x.span,
                              "check the dims: every grid dimension must be at least 1")
    return tuple(g + [1] * (3 - len(g)))


def execute(kernel: ir.Kernel, arrays: dict[str, np.ndarray], dims: dict[str, int],
            scalars: dict[str, float] | None = None, blocks=None, observe_hazards: bool = False) -> list:
    """Run every block of the grid (or just `blocks`) over `arrays` in place.

    With `observe_hazards`, shared-memory races and async hazards are recorded (not raised) and
    returned as a list of ObservedHazard.
    """
    scalars = scalars or {}
    grid = grid_size(kernel, dims, scalars)
    order = blocks if blocks is not None else itertools.product(*(range(n) for n in grid))
    found = []
    counts: dict[str, np.ndarray] = {}
    for b in order:
        bz = tuple(b) + (0,) * (3 - len(b))
        shadow = Shadow(bz) if observe_hazards else None
        m = BlockMachine(kernel, arrays, dims, scalars, bz, grid, shadow)
        m.store_counts = counts
        m.run()
        if shadow is not None:
            found.extend(shadow.found)
    for name, c in counts.items():
        twice = np.argwhere(c > 1)
        if len(twice):
            el = tuple(int(x) for x in twice[0])
            found.append(ObservedHazard("output-written-twice", name, el, NONE, NONE, None, None, (),
                                        f"written {int(c[el])} times"))
    return found

