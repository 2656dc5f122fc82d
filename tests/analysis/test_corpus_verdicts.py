"""The verifier on the corpus of correct and broken kernels (tests/analysis/corpus, written independently
of it, each judged by the interpreter in test_corpus_oracle.py).

- a correct file: no check violated, no failed numeric test, refused by nothing; at most the files in
  UNKNOWN_OK may stay unknown (each with its reason below);
- a broken file: flagged -- a violated check, a failed numeric test (the arithmetic bugs `# expect:
  tested`), or `argus check` refusing a construct the code generator cannot build -- and, when its header
  names a check, that check among the violations; no broken file is verified.
Every file runs at its defaults, as `argus check FILE` does, and within the time bound of issue 11.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from argus.analysis import VIOLATED
from argus.dsl.diagnostics import ArgusError
from argus.dsl.parser import parse_file
from argus.verification import verify_kernel
from tests.analysis.corpus_oracle import CORPUS, parse_header

CORRECT = sorted((CORPUS / "correct").glob("*.arg"))
BROKEN = sorted((CORPUS / "broken").glob("*.arg"))
# correct kernels the verifier does not settle, and why (the issue allows 1 unknown verdict in 20)
UNKNOWN_OK: dict[str, str] = {
    "moe_scatter_atomic": "which blocks add to an element through a row -> token table is not solved (the "
                          "atomic sum's models are claims the interpreter does not reproduce; flagged violated, "
                          "a false alarm, before 2026-12-05)",
}
# correct kernels the verifier flags today (each replay does not confirm it), kept so the fix shows
KNOWN_FALSE_ALARMS: dict[str, str] = {
}
SECONDS = 60  # a generous bound for a 2-core machine; the README's table gives the measured times
# measured in this process's CPU time: tests verify with ARGUS_VERIFY_JOBS=1 (no presolve children), and wall
# time stretched past the bound when other work shared CI's two cores (three files at 97-114 s, 2026-12-06)


def verdicts(path: Path, replay: bool = False) -> list:
    module = parse_file(path)
    return [verify_kernel(k, {}, file=str(path), replay=replay) for k in module.kernels]


@pytest.mark.slow
@pytest.mark.parametrize("path", CORRECT, ids=lambda p: p.stem)
def test_correct_kernel_is_not_flagged(path, request):
    if path.stem in KNOWN_FALSE_ALARMS:
        request.node.add_marker(pytest.mark.xfail(reason=KNOWN_FALSE_ALARMS[path.stem], strict=True))
    t0 = time.process_time()
    for v in verdicts(path):
        bad = [(f.check, f.message) for f in v.findings if f.status == VIOLATED]
        assert not bad, bad
        tested = v.report.tested
        assert tested is None or not tested.shapes or tested.ok, tested.render()
        if v.status != "verified":
            assert path.stem in UNKNOWN_OK, [(f.check, f.message) for f in v.findings]
    assert time.process_time() - t0 < SECONDS


@pytest.mark.slow
@pytest.mark.parametrize("path", BROKEN, ids=lambda p: p.stem)
def test_broken_kernel_is_flagged(path):
    expects = parse_header(path).expects
    try:
        got = verdicts(path)
    except ArgusError as exc:
        # refused at its line: a construct the code generator cannot build
        assert exc.diagnostics[0].code == "codegen", exc
        return
    violated = {f.check for v in got for f in v.findings if f.status == VIOLATED}
    failed_test = any(v.report.tested is not None and v.report.tested.shapes and not v.report.tested.ok for v in got)
    if not (violated or failed_test) or (expects - {"tested"} and not expects & violated):
        # a claim (a model over contract-constrained contents, an approximate query) stands once the
        # interpreter reproduces it: replay, as `argus check` runs it by default
        got = verdicts(path, replay=True)
        violated = {f.check for v in got for f in v.findings if f.status == VIOLATED}
    assert violated or failed_test, [(v.kernel, v.status) for v in got]
    if expects - {"tested"}:
        assert expects & violated or ("tested" in expects and failed_test), (expects, violated)
