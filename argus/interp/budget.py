"""What running a kernel in the interpreter will cost, judged before and while it runs.

- `check_fits`: the tensors at the given dims (the arrays, their float64 copies for the reference and
  the pristine inputs) and the largest tile, against the memory budget (argus.limits): work that
  cannot fit is refused up front with the numbers, instead of dying in an allocation.
- `paced_blocks`: the grid's blocks in launch order, projecting the total time from the blocks done so
  far; when the projection passes the time left, it stops with the estimate instead of running until
  it is killed.
- `loop_steps`: the largest number of steps a loop takes (with its enclosing loops) where the trip
  counts follow from the dims and params alone: the symbolic verifier and the interpreter both walk
  such loops step by step.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Iterator

from argus.dsl.diagnostics import Span, error
from argus.dsl.types import TileT
from argus.interp.numerics import storage_dtype
from argus.ir import nodes as ir
from argus.ir.transform import walk
from argus.limits import format_bytes, memory_budget, remaining_s

# Bytes per element of a tensor beyond its own array: a float64 copy for the reference block and a
# pristine copy of the inputs, plus the reference's own result.
_COPIES_F64 = 2


def largest_tile(kernel: ir.Kernel) -> tuple[int, Span | None]:
    """Elements of the largest tile the kernel allocates (shared buffers and register tiles)."""
    best, where = 0, None
    for node in walk(kernel.body):
        shape = None
        if isinstance(node, ir.AllocShared):
            shape = node.shape
        elif isinstance(node, ir.Expr) and isinstance(getattr(node, "type", None), TileT):
            shape = node.type.shape
        if shape:
            n = math.prod(shape)
            if n > best:
                best, where = n, node.span
    return best, where


def tensor_bytes(kernel: ir.Kernel, dims: dict[str, int]) -> int:
    total = 0
    for t in kernel.tensors:
        n = math.prod(d if isinstance(d, int) else int(dims[d]) for d in t.dims)
        total += n * (storage_dtype(t.dtype).itemsize + 8 * _COPIES_F64)
    return total


MAX_DIM = 2 ** 31 - 1  # index arithmetic is 32-bit on the GPU
MAX_VERIFY_STEPS = 256  # steps of a loop with a fixed trip count that the symbolic verifier is asked to walk


def check_dims(kernel: ir.Kernel, defines: dict[str, object]) -> None:
    """The runtime dims given for `kernel` must be integers in [1, 2**31 - 1]."""
    for d in kernel.dims:
        if d not in defines:
            continue
        v = defines[d]
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_DIM:
            raise error("dims", f"dimension {d} = {v!r} must be an integer from 1 to {MAX_DIM}", kernel.span,
                        f"give it as -D {d}=<positive integer>")


def _dims_text(dims: dict[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in dims.items())


def check_fits(kernel: ir.Kernel, dims: dict[str, int], limit: int | None = None) -> None:
    """Refuse (ArgusError "too-large") work whose memory cannot fit the budget."""
    limit = memory_budget() if limit is None else limit
    if limit is None:
        return
    need = tensor_bytes(kernel, dims)
    tile, where = largest_tile(kernel)
    tile_bytes = tile * 8 * 4  # a tile, its operands and temporaries, in float64 at worst
    if tile_bytes > limit // 2:
        raise error("too-large", f"a tile of {tile} elements needs about {format_bytes(tile_bytes)} in the "
                    f"interpreter, more than half the memory limit ({format_bytes(limit)})", where or kernel.span,
                    "tiles are held whole in memory; no GPU holds a tile this size in registers or shared memory "
                    "either")
    if need + tile_bytes > limit:
        raise error("too-large", f"at {_dims_text(dims)} the tensors need about {format_bytes(need)} in the "
                    f"interpreter, more than the memory limit ({format_bytes(limit)})", kernel.span,
                    "run it at smaller dims, raise --memory-limit, or run it on the GPU (--gpu)")


def paced_blocks(kernel: ir.Kernel, grid: tuple[int, ...], dims: dict[str, int],
                 min_measure_s: float = 0.5) -> Iterator[tuple[int, ...]]:
    """Blocks in launch order; raises ArgusError "too-slow" once the projected total passes the time left."""
    total = math.prod(grid)
    left = remaining_s()
    t0 = time.monotonic()
    for i, b in enumerate(itertools.product(*(range(n) for n in grid))):
        if left is not None and i:
            spent = time.monotonic() - t0
            projected = spent / i * total
            if spent >= min_measure_s and projected > left:
                raise error("too-slow", f"at {_dims_text(dims)} the interpreter needs about {projected:.0f} s "
                            f"({total} blocks, {spent / i:.3g} s each), more than the {left:.0f} s left of its "
                            "time limit", kernel.span,
                            "run it at smaller dims, raise --time-limit, or run it on the GPU (--gpu)")
        yield b


_INT_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
            "//": lambda a, b: a // b, "%": lambda a, b: a % b}


def _scalar(e: ir.Expr | None, env: dict[str, object]) -> int | None:
    """An index expression's value from dims, params and earlier lets alone (no block or thread ids,
    no loop variables); None when it depends on anything else."""
    if isinstance(e, ir.Const):
        return e.value if isinstance(e.value, int) and not isinstance(e.value, bool) else None
    if isinstance(e, ir.Var):
        v = env.get(e.name)
        return v if isinstance(v, int) and not isinstance(v, bool) else None
    if isinstance(e, ir.Bin) and e.op in _INT_OPS:
        a, b = _scalar(e.a, env), _scalar(e.b, env)
        if a is None or b is None or (e.op in ("//", "%") and b == 0):
            return None
        return _INT_OPS[e.op](a, b)
    if isinstance(e, ir.Math) and e.fn in ("cdiv", "min", "max"):
        args = [_scalar(x, env) for x in e.args]
        if None in args or (e.fn == "cdiv" and args[1] == 0):
            return None
        return -(-args[0] // args[1]) if e.fn == "cdiv" else (min(args) if e.fn == "min" else max(args))
    return None


def loop_steps(kernel: ir.Kernel, dims: dict[str, int]) -> tuple[int, Span | None]:
    """The most steps any loop nest takes when its trip counts are fixed by the dims (0 when none is)."""
    env: dict[str, object] = {**kernel.param_dict, **dims}
    best: list = [0, None]

    def visit(stmts: tuple[ir.Stmt, ...], outer: int) -> None:
        for s in stmts:
            if isinstance(s, ir.Let):
                v = _scalar(s.value, env)
                if v is not None:
                    env[s.name] = v
                else:
                    env.pop(s.name, None)
            elif isinstance(s, ir.For):
                lo, hi, st = _scalar(s.start, env), _scalar(s.stop, env), _scalar(s.step, env)
                trips = max(0, -(-(hi - lo) // st)) if None not in (lo, hi, st) and st > 0 else None
                steps = outer * trips if trips is not None else outer
                if trips is not None and steps > best[0]:
                    best[0], best[1] = steps, s.span
                env.pop(s.var, None)
                visit(s.body, steps)
            else:
                for field in ("body", "then", "orelse", "producer", "consumer"):
                    inner = getattr(s, field, None)
                    if isinstance(inner, tuple):
                        visit(inner, outer)

    visit(kernel.body, 1)
    return best[0], best[1]
