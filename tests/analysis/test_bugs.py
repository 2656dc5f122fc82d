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


@pytest.mark.parametrize("path", BUGS, ids=lambda p: p.stem)
def test_bug_is_found_and_replayed(path):
    code = expected(path)
    report = verify(build_file(path))
    assert report.status == VIOLATED
    hits = [f for f in report.findings if f.check == code and f.status == VIOLATED]
    assert hits, f"expected {code}, got {[f.check for f in report.findings]}"
    f = hits[0]
    assert f.span is not None and f.span.path == str(path)
    assert f.counterexample is not None
    cx = f.counterexample
    assert cx.dims or cx.notes or cx.values, "a counterexample names concrete values"
    assert f.replay is not None and f.replay.confirmed, f.replay
    text = render_finding(f)
    assert f"[{code}]" in text and "replay:" in text and "counterexample" in text or "replay:" in text
    # every violation the verifier reports for this file is confirmed too (no unconfirmed claims),
    # unless the replay cannot reach it because the interpreter first stops on another, confirmed fault
    for other in report.findings:
        if other.status == VIOLATED:
            assert other.replay is not None, other.check
            assert other.replay.confirmed or other.replay.summary.startswith("blocked:"), (other.check, other.replay)
