"""Every broken variant in examples/bugs is flagged with its expected check, a counterexample, and a
replay in the interpreter that confirms it (an unconfirmed counterexample is a verifier bug)."""

from __future__ import annotations

import re

import pytest

from argus.analysis import VIOLATED, verify
from argus.analysis.render import render_finding
from argus.ir.build import build_file
from tests.conftest import EXAMPLES

BUGS = sorted((EXAMPLES / "bugs").glob("*.arg"))


def expected(path) -> str:
    return re.search(r"# expect: (\S+)", path.read_text()).group(1)


def test_every_check_class_has_three_bugs():
    from argus.analysis.findings import CHECKS

    counts = {c: 0 for c in CHECKS}
    for b in BUGS:
        counts[expected(b)] += 1
    assert all(n >= 3 for n in counts.values()), counts


def judge(path) -> str | None:
    """None when the bug is flagged as the test requires, else what is wrong."""
    code = expected(path)
    report = verify(build_file(path))
    if report.status != VIOLATED:
        return f"status {report.status}"
    hits = [f for f in report.findings if f.check == code and f.status == VIOLATED]
    if not hits:
        return f"expected {code}, got {[(f.check, f.status) for f in report.findings]}"
    f = hits[0]
    if f.span is None or f.span.path != str(path):
        return f"span {f.span}"
    cx = f.counterexample
    if cx is None or not (cx.dims or cx.notes or cx.values):
        return "no counterexample naming concrete values"
    if f.replay is None or not f.replay.confirmed:
        return f"replay not confirmed: {f.replay}"
    text = render_finding(f)
    if not (f"[{code}]" in text and "replay:" in text and "counterexample" in text or "replay:" in text):
        return f"rendering: {text}"
    # every violation the verifier reports for this file is confirmed too (no unconfirmed claims),
    # unless the replay cannot reach it because the interpreter first stops on another, confirmed fault
    for other in report.findings:
        if other.status == VIOLATED:
            if other.replay is None:
                return f"{other.check}: no replay"
            if not (other.replay.confirmed or other.replay.summary.startswith("blocked:")):
                return f"{other.check}: {other.replay}"
    return None


@pytest.mark.parametrize("path", BUGS, ids=lambda p: p.stem)
def test_bug_is_found_and_replayed(path):
    # In a fresh interpreter: Z3's heuristics depend on the terms its (process-wide) main context already
    # holds, so in a test worker the verdict could depend on which tests ran before (CI saw a routing bug's
    # tag-assertion left unknown once, and pass alone). `argus check` verifies in a fresh process too.
    import concurrent.futures
    import multiprocessing

    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        problem = pool.submit(judge, path).result()
    assert problem is None, problem
