"""The verifier corpus (tests/analysis/corpus) against the interpreter oracle: every correct kernel
matches its reference at every shape of its header with no observed hazard, and every broken kernel
is shown wrong (a wrong output element, an interpreter fault, or an observed race / async hazard /
double write). Files marked `# oracle: not observable ...` describe bugs the interpreter cannot show
today: they are skipped with that reason, after checking that they still build and that the
interpreter still does not see them (if it does, the marker is stale)."""

from __future__ import annotations

import pytest

from argus.analysis.findings import CHECKS
from tests.analysis.corpus_oracle import CORPUS, build, corpus_files, judge, kernel_names, parse_header

CORRECT = corpus_files("correct")
BROKEN = corpus_files("broken")
EXPECT = set(CHECKS) | {"reference-footprint", "tested"}


@pytest.mark.parametrize("path", CORRECT, ids=lambda p: p.stem)
def test_correct_kernel_matches_its_reference(path):
    v = judge(path)
    assert not v.wrong, str(v)


@pytest.mark.parametrize("path", BROKEN, ids=lambda p: p.stem)
def test_broken_kernel_is_shown_wrong(path):
    h = parse_header(path)
    v = judge(path)
    if not h.observable:
        assert not v.wrong, f"the interpreter now shows this bug ({v}): drop the '# oracle:' line"
        pytest.skip(h.oracle)
    assert v.wrong, f"the interpreter finds nothing wrong: {v}"


@pytest.mark.parametrize("path", CORRECT + BROKEN, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_header(path):
    h = parse_header(path)
    assert h.klass, "no '# class:'"
    assert 2 <= len(h.dims) <= 3, "give 2-3 shape sets in '# dims:'"
    for name in kernel_names(path):  # parses and lowers (argus check --no-verify)
        build(path, name, h.params)
    if path.parent.name == "correct":
        assert h.summary and h.expect is None and h.bug is None
    else:
        assert h.expects and h.expects <= set(EXPECT), h.expect
        # the correct kernel the bug was made from: a corpus file, or an example (examples/NAME.arg)
        assert h.base, "no '# base:'"
        root = CORPUS.parents[2]
        base = root / h.base if h.base.startswith("examples/") else CORPUS / "correct" / h.base
        assert h.bug and base.exists(), (h.bug, h.base)


def test_every_class_has_correct_and_broken_kernels():
    classes = {}
    for p in CORRECT + BROKEN:
        classes.setdefault(parse_header(p).klass, set()).add(p.parent.name)
    lonely = {c: k for c, k in classes.items() if k != {"correct", "broken"} and c != "baseline"}
    assert not lonely, lonely
    assert len(CORRECT) >= 30 and len(BROKEN) >= 45
