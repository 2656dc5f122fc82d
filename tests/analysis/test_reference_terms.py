"""The reference block as data flow: for each NumPy construct a reference may use, which input elements
an output element depends on (argus.analysis.reference_terms + dependencies), asked of z3 at concrete
coordinates: the dependency it must have holds, the one it must not have does not."""

from __future__ import annotations

import pytest
import z3

from argus.analysis import terms as T
from argus.analysis.dependencies import Dependencies
from argus.analysis.reference_terms import NotAnalysable, reference_arrays
from argus.analysis.symbolic import Context
from argus.ir.build import build_source

HEADER = """
kernel k({args}):
    launch grid=(1,), threads=128
    pass
reference:
{ref}
"""


def arrays(args: str, ref: str, defines: dict):
    src = HEADER.format(args=args, ref="\n".join("    " + line for line in ref.strip().splitlines()))
    kernel = build_source(src)
    ctx = Context.create(kernel, defines)
    env, _rt = reference_arrays(kernel, ctx)
    return env, ctx


def depends(env, ctx, out: str, at: tuple, tensor: str, coords: tuple) -> bool:
    """Does out[at] depend on tensor[coords] (with the dims fixed by the context)?"""
    term = env[out].elem(tuple(z3.IntVal(i) for i in at))
    c = tuple(z3.Int(f"c{i}") for i in range(len(coords)))
    f = Dependencies({tensor: c}).exact(term, tensor, frozenset(range(len(coords))))
    if f is False:
        return False
    s = z3.Solver()
    s.add(*ctx.constraints, *[x == v for x, v in zip(c, coords)], T.zb(f))
    return s.check() == z3.sat


GEMM = "A: f32[M, K], B: f32[K, N], C: f32[M, N]"
DIMS = {"M": 4, "N": 5, "K": 6}


def test_matmul_sums_one_row_and_one_column():
    env, ctx = arrays(GEMM, "C = A @ B", DIMS)
    assert depends(env, ctx, "C", (1, 2), "A", (1, 5)) and depends(env, ctx, "C", (1, 2), "B", (5, 2))
    assert not depends(env, ctx, "C", (1, 2), "A", (2, 0)) and not depends(env, ctx, "C", (1, 2), "B", (0, 3))
    assert not depends(env, ctx, "C", (1, 2), "A", (1, 6))  # past K


def test_matmul_with_a_vector_follows_numpy():
    """A 1-D operand is a row on the left and a column on the right, the added axis dropped: A @ x sums
    row i of A against x, x @ B column j of B against x, x @ x is a scalar."""
    dims = {"M": 4, "K": 6}
    env, ctx = arrays("A: f32[M, K], x: f32[K], y: f32[M]", "y = A @ x", dims)
    assert len(env["y"].shape) == 1
    assert depends(env, ctx, "y", (1,), "A", (1, 5)) and depends(env, ctx, "y", (1,), "x", (5,))
    assert not depends(env, ctx, "y", (1,), "A", (2, 0)) and not depends(env, ctx, "y", (1,), "x", (6,))
    env, ctx = arrays("x: f32[K], B: f32[K, M], y: f32[M]", "y = x @ B", dims)
    assert depends(env, ctx, "y", (3,), "B", (2, 3)) and not depends(env, ctx, "y", (3,), "B", (2, 1))
    env, ctx = arrays("x: f32[K], s: f32[M]", "s = (x @ x) + 0.0 * s", dims)
    assert depends(env, ctx, "s", (0,), "x", (4,))


def test_concatenate_negative_slices_and_cumsum():
    """A stencil's shifted copies (concatenate of a fill and X[:, :-1]) read the neighbour column; cumsum's
    element j sums the line's coordinates 0..j."""
    dims = {"M": 3, "N": 5}
    env, ctx = arrays("X: f32[M, N], Y: f32[M, N]",
                      "Y = concatenate((full((M, 1), 0.0), X[:, :-1]), axis=1) + X[:, 1:][:, :1]", dims)
    assert depends(env, ctx, "Y", (1, 3), "X", (1, 2)) and not depends(env, ctx, "Y", (1, 3), "X", (1, 3))
    # column 0 of the shifted copy is the fill: X[:, 1:][:, :1] (column 1) is all Y[1, 0] reads
    assert depends(env, ctx, "Y", (1, 0), "X", (1, 1)) and not depends(env, ctx, "Y", (1, 0), "X", (1, 0))
    env, ctx = arrays("X: f32[M, N], Y: f32[M, N]", "Y = cumsum(X, axis=1)", dims)
    assert depends(env, ctx, "Y", (2, 3), "X", (2, 0)) and depends(env, ctx, "Y", (2, 3), "X", (2, 3))
    assert not depends(env, ctx, "Y", (2, 3), "X", (2, 4)) and not depends(env, ctx, "Y", (2, 3), "X", (1, 0))


def test_einsum_with_bias_broadcast_and_transpose():
    env, ctx = arrays("A: f32[M, K], W: f32[N, K], bias: f32[N], C: f32[M, N]",
                      "C = einsum('mk,nk->mn', A, W) + bias[None, :]", DIMS)
    assert depends(env, ctx, "C", (0, 3), "W", (3, 4)) and depends(env, ctx, "C", (0, 3), "bias", (3,))
    assert not depends(env, ctx, "C", (0, 3), "bias", (2,)) and not depends(env, ctx, "C", (0, 3), "W", (2, 4))
    env, ctx = arrays("A: f32[M, K], W: f32[N, K], C: f32[M, N]", "C = A @ W.T", DIMS)
    assert depends(env, ctx, "C", (0, 3), "W", (3, 4)) and not depends(env, ctx, "C", (0, 3), "W", (4, 3))


def test_repeat_maps_query_heads_to_their_kv_head():
    env, ctx = arrays("K: f32[H2, S], O: f32[H, S]", "O = repeat(K, 2, axis=0)", {"H": 4, "H2": 2, "S": 3})
    assert depends(env, ctx, "O", (3, 1), "K", (1, 1)) and not depends(env, ctx, "O", (3, 1), "K", (0, 1))


def test_causal_mask_and_softmax_drop_masked_keys():
    ref = """
scores = einsum("qd,kd->qk", Q, K) + causal_mask(SQ, SKV)
O = einsum("qk,kd->qd", softmax(scores, axis=-1), V)
"""
    env, ctx = arrays("Q: f32[SQ, D], K: f32[SKV, D], V: f32[SKV, D], O: f32[SQ, D]", ref, {"SQ": 4, "SKV": 4, "D": 2})
    assert depends(env, ctx, "O", (1, 0), "V", (1, 0)) and depends(env, ctx, "O", (1, 0), "K", (0, 1))
    assert not depends(env, ctx, "O", (1, 0), "V", (2, 0)) and not depends(env, ctx, "O", (1, 0), "K", (3, 0))


def test_tril_triu_where_on_positions():
    env, ctx = arrays("X: f32[N, N], Y: f32[N, N]", "Y = tril(X) + triu(X, 2)", {"N": 4})
    assert depends(env, ctx, "Y", (2, 1), "X", (2, 1)) and depends(env, ctx, "Y", (0, 3), "X", (0, 3))
    assert not depends(env, ctx, "Y", (1, 2), "X", (1, 2))
    env, ctx = arrays("X: f32[N], Y: f32[N]", "Y = where(arange(N) < 2, X, 0.0)", {"N": 4})
    assert depends(env, ctx, "Y", (1,), "X", (1,)) and not depends(env, ctx, "Y", (3,), "X", (3,))


def test_reductions_along_an_axis():
    for fn in ("sum", "max", "mean"):
        env, ctx = arrays("X: f32[R, C], Y: f32[R]", f"Y = {fn}(X, axis=1)", {"R": 3, "C": 5})
        assert depends(env, ctx, "Y", (1,), "X", (1, 4)) and not depends(env, ctx, "Y", (1,), "X", (2, 0))


def test_gather_through_an_index_tensor():
    env, ctx = arrays("Ys: f32[M, H], pos: i32[T], Out: f32[T, H]", "Out = Ys[pos]", {"M": 5, "H": 2, "T": 3})
    term = env["Out"].elem((z3.IntVal(1), z3.IntVal(0)))
    atoms = [x for x in [term] if isinstance(x, T.Atom)]
    assert atoms and atoms[0].tensor == "Ys" and str(atoms[0].coords[0]) == "pos(1)"


def test_one_hot_and_reshape_split_k():
    ref = """
slice_of_k = one_hot(arange(K) // 2, SPLIT)
P = einsum("mk,ks,kn->smn", A, slice_of_k, B)
"""
    env, ctx = arrays("A: f32[M, K], B: f32[K, N], P: f32[SPLIT, M, N]", ref, {"M": 2, "N": 2, "K": 4, "SPLIT": 2})
    assert depends(env, ctx, "P", (1, 0, 0), "A", (0, 3)) and not depends(env, ctx, "P", (1, 0, 0), "A", (0, 1))
    env, ctx = arrays("X: f32[R, C], Y: f32[C, R]", "Y = reshape(transpose(X), (C, R))", {"R": 2, "C": 3})
    assert depends(env, ctx, "Y", (2, 1), "X", (1, 2))


def test_topk_and_take_along_axis_depend_on_their_whole_line():
    # a selection by value depends on every element of its row and on no other row; the gathered value too
    env, ctx = arrays("X: f32[R, C], I: i32[R, 2], W: f32[R, 2]",
                      "I = topk(X, 2, axis=1)\nW = softmax(take_along_axis(X, I, axis=1), axis=1)", {"R": 3, "C": 5})
    for out in ("I", "W"):
        assert all(depends(env, ctx, out, (1, 1), "X", (1, c)) for c in range(5))
        assert not depends(env, ctx, out, (1, 1), "X", (0, 0)) and not depends(env, ctx, out, (1, 0), "X", (2, 4))
        assert not depends(env, ctx, out, (1, 1), "X", (1, 5))  # past C


@pytest.mark.parametrize("ref", ["Y = take_along_axis(X, X, axis=1)", "Y = topk(X, R, axis=1)",
                                 "Y = reshape(X, (R * C,))[None, :]"])
def test_unanalysable_constructs_say_why(ref):
    # the contract is then unknown with this reason (footprint.py), never verified
    with pytest.raises(NotAnalysable) as exc:
        arrays("X: f32[R, C], Y: f32[R, C]", ref, {"R": 2, "C": 3})
    assert str(exc.value)


def test_slice_bounds_past_the_axis_are_not_analysed():
    """NumPy clamps a slice bound past its axis (X[:, -8:] of 5 columns is all 5). The terms take a bound
    only where it is provably inside its axis (the dims' ranges, the kernel's assumes): elsewhere the
    reference is not analysed (so unknown), never taken with a shape NumPy would not give it."""
    env, ctx = arrays("X: f32[M, N], Y: f32[M, N]", "Y = X[:, -3:] + X[:, 0:N][:, :3]", {"M": 3, "N": 5})
    assert depends(env, ctx, "Y", (1, 0), "X", (1, 2)) and depends(env, ctx, "Y", (1, 0), "X", (1, 0))
    for ref in ("Y = X[:, -8:]", "Y = X[:, 0:9]", "Y = X[:, 3:2]"):
        with pytest.raises(NotAnalysable, match="outside its axis"):
            arrays("X: f32[M, N], Y: f32[M, N]", ref, {"M": 3, "N": 5})
    kernel = build_source(HEADER.format(args="X: f32[M, N], Y: f32[M, 8]", ref="    Y = X[:, -8:]"))
    with pytest.raises(NotAnalysable, match="outside its axis"):
        reference_arrays(kernel, Context.create(kernel, {}))
    ctx = Context.create(kernel, {})
    ctx.constraints.append(ctx.dims["N"] >= 8)  # what assume(N >= 8) adds
    env, _ = reference_arrays(kernel, ctx)
    assert len(env["Y"].shape) == 2
