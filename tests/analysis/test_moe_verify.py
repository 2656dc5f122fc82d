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
