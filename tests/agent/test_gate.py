"""The gate before evaluation: front end, interface, verifier hook (and its adapter), small-shape replay."""

from __future__ import annotations

from dataclasses import dataclass, field

from argus.agent import gate, verify
from argus.agent.program import Candidate
from argus.agent.verify import VerifyOutcome, adapt
from tests.agent import helpers as h


def start_iface():
    c = Candidate.make(h.GEMM.read_text(), dict(h.NAIVE))
    return gate.interface_of(gate.build(c), c.source)


def check(c: Candidate, verifier: str = "interp"):
    return gate.check(c, start_iface(), list(h.CHECKS), seed=0, verifier=verifier)


def test_clean_candidate_is_unknown_not_verified_without_a_prover():
    out, k = check(Candidate.make(h.GEMM.read_text(), dict(h.NAIVE)))
    assert out.status == "unknown" and out.source == "frontend+interp" and k is not None
    assert "interpreter matched" in out.notes[-1]


def test_compile_error_is_a_violation_with_its_diagnostic():
    out, k = check(Candidate.make(h.GEMM.read_text(), {**h.NAIVE, "SWIZZLE": 128}))
    assert out.violated and out.source == "frontend" and k is None
    (f,) = out.findings
    assert f.code == "swizzle" and "rows are 64 bytes" in f.message and f.line


def test_interface_changes_are_rejected():
    src = h.gemm_variant(("C = A @ B", "C = A @ B * 0"))
    out, _ = check(Candidate.make(src, dict(h.NAIVE)))
    assert out.violated and out.findings[0].code == "interface" and "reference" in out.findings[0].message


def test_wrong_program_gets_an_interpreter_counterexample():
    src = h.gemm_variant(("grid=(cdiv(M, BM), cdiv(N, BN))", "grid=(M // BM, cdiv(N, BN))"))
    out, _ = check(Candidate.make(src, dict(h.NAIVE)))
    assert out.violated and out.source == "interp"
    assert out.findings[0].code == "wrong-result" and "unwritten" in out.findings[0].counterexample


@dataclass
class _Cx:
    def to_json(self):
        return {"dims": {"M": 256}, "block": [1, 0], "thread": 37}


@dataclass
class _Finding:
    check: str
    status: str
    message: str
    counterexample: object = None
    replay: object = None
    span: object = None


@dataclass
class _Report:
    status: str
    findings: list = field(default_factory=list)


def test_adapter_reads_the_static_verifiers_report():
    rep = _Report("violated", [_Finding("mma-contraction", "violated", "A column K != B row K", _Cx()),
                               _Finding("race", "unknown", "not checked")])
    out = adapt(rep)
    assert out.status == "violated" and len(out.findings) == 1
    f = out.findings[0]
    assert f.code == "mma-contraction" and "thread" in f.counterexample and "37" in f.counterexample
    assert adapt({"status": "verified", "findings": []}).status == "verified"
    assert adapt(object()).status == "unknown"
    assert adapt(VerifyOutcome("unknown")) == VerifyOutcome("unknown")


def test_gate_uses_the_static_verifier_when_installed(monkeypatch):
    calls = []

    def fake_verify(k):
        calls.append(k.name)
        return _Report("violated", [_Finding("async-overwrite", "violated", "stage 0 refilled while read", _Cx())])

    monkeypatch.setattr(verify, "analysis_verifier", lambda: fake_verify)
    monkeypatch.setattr(gate, "analysis_verifier", lambda: fake_verify)
    out, _ = check(Candidate.make(h.GEMM.read_text(), dict(h.NAIVE)), verifier="auto")
    assert out.violated and out.source == "argus.analysis" and out.findings[0].code == "async-overwrite"
    assert verify.verify(gate.build(Candidate.make(h.GEMM.read_text(), dict(h.NAIVE)))).violated
    assert calls  # the hook itself ran (in the parent for verify(), in the gate's child for check())


def test_verify_hook_without_a_verifier(monkeypatch):
    monkeypatch.setattr(verify, "analysis_verifier", lambda: None)
    out = verify.verify(gate.build(Candidate.make(h.GEMM.read_text(), {})))
    assert out.status == "unknown" and "not available" in out.notes[0]


def test_the_real_static_verifier_plugs_in():
    if verify.analysis_verifier() is None:
        import pytest

        pytest.skip("argus.analysis.verify is not installed")
    out, _ = gate.check(Candidate.make(h.GEMM.read_text(), dict(h.NAIVE)), start_iface(), list(h.CHECKS),
                        verifier="analysis", analysis_timeout_s=60)
    assert out.source.startswith("argus.analysis") and out.status in ("verified", "unknown"), out.describe()
