"""The lowered IR of examples/gemm.arg (golden files) and the pipeline schedule's structure.

Golden files are rewritten only when ARGUS_UPDATE_GOLDEN=1 is set; otherwise a difference fails.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from argus.ir import nodes as ir
from argus.ir.build import build_file, build_source
from argus.ir.printer import kernel as print_kernel
from tests.conftest import EXAMPLES

GOLDEN = Path(__file__).parent / "golden"


@pytest.mark.parametrize("mma", ["wgmma", "mma.sync"])
def test_gemm_ir_golden(mma):
    text = print_kernel(build_file(EXAMPLES / "gemm.arg", {"MMA": mma}))
    path = GOLDEN / f"gemm_{mma.replace('.', '_')}.ir"
    if os.environ.get("ARGUS_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert path.exists(), f"missing golden file {path}; create it with ARGUS_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"IR changed; if intended, rerun with ARGUS_UPDATE_GOLDEN=1 ({path})"


def _flat(stmts):
    for s in stmts:
        yield s
        for f in ("body", "then", "orelse"):
            if hasattr(s, f):
                yield from _flat(getattr(s, f))


@pytest.mark.parametrize("stages", [1, 2, 3, 4])
def test_pipeline_schedule_shape(stages):
    k = build_file(EXAMPLES / "gemm.arg", {"STAGES": stages})
    top = k.body
    assert not any(isinstance(s, ir.PipelineFor) for s in _flat(top))
    loops = [s for s in top if isinstance(s, ir.For)]
    if stages == 1:
        (loop,) = loops
        kinds = [type(s).__name__ for s in loop.body]
        assert kinds[:2] == ["Let", "Copy"] and "WaitGroup" in kinds and kinds[-1] == "Barrier"
        return
    prologue = [s for s in top if isinstance(s, ir.If)]
    assert len(prologue) == stages - 1  # one guarded prefetch per stage but the last
    steady, epilogue = loops
    waits = [s for s in _flat(steady.body) if isinstance(s, ir.WaitGroup)]
    assert [w.n for w in waits] == [stages - 2]
    # steady state: wait, barrier, prefetch for k + S - 1, commit, then compute
    kinds = [type(s).__name__ for s in steady.body]
    assert kinds[:3] == ["WaitGroup", "Barrier", "Let"] and kinds.index("Commit") < kinds.index("AssertTag")
    prefetch = next(s for s in steady.body if isinstance(s, ir.Let))
    assert prefetch.name == "s__pf"
    assert "k + " + str(stages - 1) in print_kernel(k)
    # epilogue: no copies, still one (empty) commit group per step so wait_group(S-2) keeps its meaning
    assert not any(isinstance(s, ir.Copy) for s in epilogue.body)
    assert sum(isinstance(s, ir.Commit) for s in epilogue.body) == 1


def test_every_node_keeps_a_span():
    k = build_file(EXAMPLES / "gemm.arg")
    for s in _flat(k.body):
        assert s.span is not None and s.span.path.endswith("gemm.arg"), s


def test_params_are_bound_as_constants():
    k = build_file(EXAMPLES / "gemm.arg", {"BM": 64, "BN": 64})
    text = print_kernel(k)
    assert "BM" not in text.split("\n", 2)[2] and "bm * 64" in text and "f32[64, 64]" in text
    assert k.param_dict["BM"] == 64


def test_layout_assignment_records_warp_grid():
    k = build_file(EXAMPLES / "gemm.arg", {"MMA": "mma.sync"})
    mma = next(s.value for s in _flat(k.body) if isinstance(s, ir.Let) and isinstance(s.value, ir.Mma))
    assert mma.layout.instr == "mma.sync" and mma.layout.warps_m * mma.layout.warps_n == 8
    assert mma.layout.inst_shape == (16, 8, 16)
    k = build_file(EXAMPLES / "gemm.arg")
    mma = next(s.value for s in _flat(k.body) if isinstance(s, ir.Let) and isinstance(s.value, ir.Mma))
    assert (mma.layout.warps_m, mma.layout.warps_n, mma.layout.inst_shape) == (2, 1, (64, 128, 16))


def test_parallel_assignment_uses_temporaries():
    k = build_source("kernel k(A: f32[N]):\n    launch grid=(1,), threads=32\n    a, b = 1, 2\n    a, b = b, a\n")
    lets = [s for s in k.body if isinstance(s, ir.Let)]
    assert [s.name for s in lets] == ["a", "b", "a__tmp", "b__tmp", "a", "b"]
