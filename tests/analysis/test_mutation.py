"""Mutation test: no mutant of the GEMM kernels that the interpreter shows to be wrong is verified."""

from __future__ import annotations

from pathlib import Path

import pytest

from argus.analysis import VERIFIED, verify
from argus.dsl.diagnostics import ArgusError
from argus.ir.build import build_source
from tests.analysis.mutation import interpreter_says_wrong, mutants
from tests.conftest import EXAMPLES
from tests.interp.test_gemm import manual

SMALL = {"BM": 64, "BN": 64, "BK": 32, "STAGES": 3, "SWIZZLE": 64}
CORPUS = Path(__file__).parent / "corpus" / "correct"
BASES = {
    "gemm.arg": ((EXAMPLES / "gemm.arg").read_text(), SMALL),
    "gemm-hand-pipelined": (manual("wait_async(a_s, b_s)"), {}),
    # persistent, grouped raster, warp-specialised ring; 3 blocks so that a block walks several tiles
    "gemm_ws.arg": ((EXAMPLES / "gemm_ws.arg").read_text(),
                    {"BM": 64, "BN": 64, "BK": 64, "STAGES": 2, "CONSUMERS": 1, "GROUP_M": 2, "SMS": 3}),
    "gemm_bias (epilogue)": ((CORPUS / "gemm_bias.arg").read_text(), {}),
}


@pytest.mark.slow
@pytest.mark.parametrize("base", list(BASES))
def test_mutants_are_never_silently_verified(base):
    text, defines = BASES[base]
    assert verify(build_source(text, defines), defines).status == VERIFIED  # the original: zero findings
    counts = {"mutants": 0, "invalid": 0, "wrong": 0, "flagged": 0, "equivalent": 0, "flagged_equivalent": 0}
    silent = []
    for mu in mutants(text):
        counts["mutants"] += 1
        try:
            k = build_source(mu.text, defines, path="mutant.arg")
        except ArgusError:
            counts["invalid"] += 1
            continue
        reason = interpreter_says_wrong(mu.text, defines)
        report = verify(k, defines, do_replay=False, test=False)
        if reason is None:
            counts["equivalent"] += 1
            counts["flagged_equivalent"] += report.status != VERIFIED  # e.g. a mutated assert_tag that is false
            continue
        counts["wrong"] += 1
        if report.status == VERIFIED:
            silent.append((mu.name, reason))
        else:
            counts["flagged"] += 1
    print(f"\nmutation counts for {base}: {counts}")
    assert counts["wrong"] >= 10
    assert not silent, silent
