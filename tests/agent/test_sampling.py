"""The sliced reference: a dimension is sliced only where slicing provably leaves the values alone."""

from __future__ import annotations

import numpy as np

from argus.agent.sampling import SlicedReference, choose_indices, compare_sample
from argus.interp.run import make_arrays
from argus.ir.build import build_source
from tests.agent import helpers as h


def gemm_with_reference(reference: str):
    src = h.gemm_variant(("    C = A @ B", f"    C = {reference}"))
    return build_source(src, dict(h.NAIVE))


def test_a_matmul_is_sliced_along_both_output_dims():
    refs = SlicedReference(gemm_with_reference("A @ B"), {})
    rng = np.random.default_rng(0)
    assert refs.sliceable("C", {"M": 40, "N": 24, "K": 16}, rng) == ("M", "N")
    dims = {"M": 300, "N": 200, "K": 64}
    arrays = make_arrays(refs.k, dims, rng)
    select = choose_indices({"M": np.arange(300), "N": np.arange(200)}, dims, refs, rng, per_dim=8)
    assert all(len(ix) == 8 and ix[0] == 0 and ix[-1] == dims[d] - 1 for d, ix in select.items())
    sample = refs.sample(arrays, dims, "C", select)
    full = arrays["A"].astype(np.float64) @ arrays["B"].astype(np.float64)
    assert np.allclose(sample.take(full), sample.reference)
    out = full.astype(np.float32)
    assert compare_sample(out, sample, refs.k.tensor("C").dtype)["wrong"] == 0
    out[select["M"][3], select["N"][5]] += 1.0
    res = compare_sample(out, sample, refs.k.tensor("C").dtype)
    assert res["wrong"] == 1 and res["first_wrong"][0] == [int(select["M"][3]), int(select["N"][5])]


def test_a_reference_that_uses_positions_is_not_sliced_along_them():
    """Rows numbered by arange(M): slicing M would renumber them, so only N is sliced."""
    refs = SlicedReference(gemm_with_reference("A @ B + arange(M)[:, None]"), {})
    assert refs.sliceable("C", {"M": 40, "N": 24, "K": 16}, np.random.default_rng(1)) == ("N",)


def test_unaffordable_samples_shrink_then_give_up():
    refs = SlicedReference(gemm_with_reference("A @ B + arange(M)[:, None]"), {})
    big = {"M": 1 << 20, "N": 1 << 20, "K": 1 << 20}
    assert choose_indices({"N": np.arange(64)}, big, refs, np.random.default_rng(2)) is None


def test_a_dim_of_size_one_at_the_probe_is_not_sliced():
    """Decode attention's NS is 1 at small shapes; its reference's one_hot(arange(SKV) // CHUNK, NS) over a
    sliced NS would be another split, so a probe that cannot slice NS must not call it sliceable."""
    from argus.dsl.parser import parse
    from argus.ir.build import build_kernel
    from tests.conftest import EXAMPLES

    node = next(k for k in parse((EXAMPLES / "decode_attention.arg").read_text(), "d.arg").kernels
                if k.name == "decode_split")
    refs = SlicedReference(build_kernel(node, {}), {})
    probe = {"B": 2, "H": 8, "D": 128, "HKV": 1, "SKV": 150, "NS": 1}
    found = refs.sliceable("OP", probe, np.random.default_rng(0))
    assert "NS" not in found and "B" in found
