"""The verifier on examples/moe.arg: data-dependent indices (uninterpreted tensor contents), masked
stores, and output coverage proved under the kernels' schedule contract (quantified assumes)."""

from __future__ import annotations

import pytest

from argus.analysis import VERIFIED, verify
from argus.cli import main
from argus.ir.build import build_file, build_source
from tests.conftest import EXAMPLES

PATH = EXAMPLES / "moe.arg"
COVERAGE = {"output-unwritten", "output-written-twice"}


@pytest.mark.parametrize("name", ["moe_up", "moe_down", "moe_combine"])
def test_moe_kernels_verify(name):
    r = verify(build_file(PATH, kernel=name))
    assert r.status == VERIFIED, [(f.check, f.message) for f in r.findings]
    assert all(c.status == VERIFIED for c in r.results)


def test_without_the_schedule_contract_coverage_is_not_verified():
    src = PATH.read_text()
    start = src.index("kernel moe_down")
    kernel = src[start:src.index("kernel moe_combine")]
    lines = [ln for ln in kernel.splitlines() if "over=" not in ln and "row_tile[r])]" not in ln
             and "and r < load(tile_row" not in ln]
    r = verify(build_source("\n".join(lines) + "\n"))
    cov = {c.check: c.status for c in r.results if c.check in COVERAGE}
    assert VERIFIED not in cov.values(), cov
    assert r.status != VERIFIED


def test_cli_checks_every_kernel_of_the_file(capsys):
    code = main(["check", str(PATH)])
    out = capsys.readouterr().out
    for name in ("moe_up", "moe_down", "moe_combine"):
        assert f"kernel '{name}': verified" in out
    assert "layer 'moe' ok" in out and "ground truth of Out" in out
    assert code == 0


def test_a_remapped_block_index_makes_the_coverage_witnesses_a_guess():
    """tile_row[t] with t = block_id(0) names the writing block exactly; t = f(block) (a grouped
    raster) does not, so a model of the 'unwritten' query is only a claim for replay to settle."""
    import z3

    from argus.analysis.checks.coverage_data import _direct_index

    f = z3.Function("tile_row", z3.IntSort(), z3.IntSort())
    b = z3.Int("b0")
    assert _direct_index(f(b) + 3, "b0", {"tile_row"})
    assert _direct_index(f(b) * 64 + f(f(b)), "b0", {"tile_row"})
    assert not _direct_index(f(b / 4 + b % 2), "b0", {"tile_row"})
    assert not _direct_index(f(b) + b, "b0", {"tile_row"})


def test_an_unreproduced_claim_is_unknown_and_a_reproduced_one_violated():
    from argus.analysis.findings import UNKNOWN, VIOLATED, CheckResult, Finding, Replay
    from argus.analysis.verify import settle_claims

    def result(claim: bool, confirmed: bool | None) -> CheckResult:
        f = Finding("output-unwritten", VIOLATED, "output 'Hs' has elements no block writes", None, claim=claim,
                    replay=None if confirmed is None else Replay(confirmed, ""))
        return CheckResult("output-unwritten", VIOLATED, 0.0, [f])

    rs = [result(True, False), result(True, None), result(True, True), result(False, False)]
    settle_claims(rs)
    assert [r.status for r in rs] == [UNKNOWN, UNKNOWN, VIOLATED, VIOLATED]
    assert rs[0].findings[0].message.startswith("not proved: output 'Hs'")


def test_an_unmodelled_construct_is_one_warning_and_the_numeric_tier_still_runs():
    """Symbolic execution stops at a store masked by data (where= computed from loaded values): every check
    is unknown for one reason, printed once, and the interpreter still tests the kernel at shapes its
    assumes allow."""
    from argus.dsl.parser import parse
    from argus.verification import verify_kernel

    src = """kernel relu_into(X: f32[M, N], Y: f32[M, N]):
    param BM = 16
    param BN = 64
    launch grid=(cdiv(M, BM),), threads=128
    assume(N == BN)
    x = load(X[block_id(0) * BM : +BM, 0 : +BN])
    store(Y[block_id(0) * BM : +BM, 0 : +BN], x, where=x > 0.0)
reference:
    Y = where(X > 0, X, Y)
"""
    v = verify_kernel(parse(src, "relu_into.arg").kernels[0], {}, file="relu_into.arg")
    assert v.status == "unknown"
    assert v.report.tested is not None and v.report.tested.shapes and v.report.tested.ok
    text = v.render()
    assert text.count("not checked: unsupported construct") == 1 and "checks: mma-contraction" in text


def test_a_recursion_error_inside_z3_is_unknown_not_an_internal_error(monkeypatch):
    """z3's C bindings report a RecursionError met converting an argument as ctypes.ArgumentError."""
    import ctypes

    import argus.verification as V
    from argus.dsl.parser import parse_file

    def deep(*a, **kw):
        raise ctypes.ArgumentError("argument 1: RecursionError: ???")
    monkeypatch.setattr(V, "analysis_verify", deep)
    node = parse_file(str(EXAMPLES / "rmsnorm.arg")).kernels[0]
    v = V.verify_kernel(node, {}, file="rmsnorm.arg")
    assert v.status == "unknown" and any("RecursionError" in n for n in v.notes)


def test_a_quantified_contract_on_an_index_tensor_bounds_a_gather():
    """assume(lambda r: 0 <= idx[r] < T, over=M) is instantiated at the rows the obligations read."""
    from argus.dsl.parser import parse
    from argus.verification import verify_kernel

    src = """kernel gather(X: f32[T, N], idx: i32[M], Y: f32[M, N]):
    param BN = 64
    launch grid=(M,), threads=64
    assume(N == BN)
    assume(lambda r: 0 <= load(idx[r]) and load(idx[r]) < T, over=M)
    m = block_id(0)
    store(Y[m : +1, 0 : +BN], load(X[load(idx[m]) : +1, 0 : +BN], masked=False))
reference:
    Y = X[idx]
"""
    v = verify_kernel(parse(src, "gather.arg").kernels[0], {}, file="gather.arg")
    assert v.status == "verified", v.render()
    bad = src.replace("    assume(lambda r: 0 <= load(idx[r]) and load(idx[r]) < T, over=M)\n", "")
    v = verify_kernel(parse(bad, "gather.arg").kernels[0], {}, file="gather.arg", test=False)
    assert "oob-global" in {f.check for f in v.findings if f.status == "violated"}
