"""Register values carried across persistent tiles (argus/analysis/carried.py): which carried values the
prefetch induction proves, which stay unknown and why, and the verdicts that follow."""

from __future__ import annotations

from argus.analysis import UNKNOWN, VERIFIED, VIOLATED, verify
from argus.analysis.carried import prefetch_slice, written_tensors
from argus.ir import nodes as ir
from argus.ir.build import build_source
from argus.ir.transform import read_before_assigned, walk

HEAD = """
kernel k(X: bf16[M, N], Y: bf16[M, N]):
    param BN = 64
    launch grid=(min(M, 3),), threads=32
    assume(N <= BN)
    xn = load(X[block_id(0) : +1, 0 : +BN])
    acc = zeros(f32[1, BN])
    for t in persistent(M):
"""
TAIL = """reference:
    Y = X
"""


def _kernel(body: str) -> ir.Kernel:
    return build_source(HEAD + body + TAIL)


def _slice(k: ir.Kernel):
    loop = next(x for x in walk(k.body) if isinstance(x, ir.For) and x.kind == "persistent")
    names = sorted(read_before_assigned(loop.body) & {"xn", "acc"})
    return prefetch_slice(loop.body, names, written_tensors(k))


PREFETCH = """        x = xn
        xn = load(X[t + num_blocks(0) : +1, 0 : +BN])
        store(Y[t : +1, 0 : +BN], x)
"""


def test_a_prefetch_is_a_function_of_the_tile() -> None:
    got = _slice(_kernel(PREFETCH))
    assert not isinstance(got, str) and [s.name for s in got] == ["xn"]


def test_an_accumulator_depends_on_the_previous_tile() -> None:
    got = _slice(_kernel("""        acc = acc + cast(load(X[t : +1, 0 : +BN]), f32)
        store(Y[t : +1, 0 : +BN], cast(acc, bf16))
"""))
    assert got == "the value depends on the previous tile's acc"


GUARDED = """        x = xn
        if t + num_blocks(0) < M:
            xn = load(X[t + num_blocks(0) : +1, 0 : +BN])
        store(Y[t : +1, 0 : +BN], x)
"""


def test_a_guarded_prefetch_is_in_the_slice() -> None:
    got = _slice(_kernel(GUARDED))
    assert not isinstance(got, str) and [type(s).__name__ for s in got] == ["If"]


def test_a_value_assigned_in_a_loop_is_not_a_function_of_the_tile() -> None:
    got = _slice(_kernel("""        x = xn
        for i in range(2):
            xn = load(X[t + num_blocks(0) : +1, 0 : +BN])
        store(Y[t : +1, 0 : +BN], x)
"""))
    assert isinstance(got, str) and "loop or branch" in got


def test_a_prefetch_of_a_written_tensor_is_not_pure() -> None:
    got = _slice(_kernel("""        x = xn
        xn = load(Y[t + num_blocks(0) : +1, 0 : +BN])
        store(Y[t : +1, 0 : +BN], x)
"""))
    assert got == "xn reads Y, which the kernel writes"


def test_verdicts() -> None:
    assert verify(_kernel(PREFETCH)).status == VERIFIED
    assert verify(_kernel(GUARDED)).status == VERIFIED
    # a guard that can skip the load before a tile the block still runs: that tile would start from an
    # older row; the executor cannot show the guard holds, so the kernel is unknown, never verified
    assert verify(_kernel(GUARDED.replace("< M:", "< M - 1:"))).status == UNKNOWN
    wrong = PREFETCH.replace("t + num_blocks(0)", "t + 1")
    assert verify(_kernel(wrong)).status == VIOLATED
    # an accumulator that is right on a block's first two tiles: unknown, never verified
    acc = _kernel("""        acc = acc * 0.0 + cast(load(X[t : +1, 0 : +BN]), f32)
        store(Y[t : +1, 0 : +BN], cast(acc, bf16))
""")
    assert verify(acc).status == UNKNOWN
