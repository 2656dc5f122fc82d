"""The parser tables: never a pickle from a shared location; the per-user JSON cache is checked."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from argus.dsl import tables
from argus.dsl.parser import _ArgusIndenter
from tests.conftest import EXAMPLES, ROOT

GRAMMAR = (ROOT / "argus" / "dsl" / "grammar.lark").read_text()
OPTIONS = dict(postlex=_ArgusIndenter(), propagate_positions=True, maybe_placeholders=True)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "grammar"


def _entry(cache: Path) -> Path:
    (entry,) = cache.iterdir()
    return entry


def test_cached_tables_parse_exactly_like_built_ones(cache: Path) -> None:
    built = tables.load_parser(GRAMMAR, **OPTIONS)  # builds and stores
    entry = _entry(cache)
    assert entry.suffix == ".json" and entry.stat().st_mode & 0o777 == 0o600
    assert cache.stat().st_mode & 0o777 == 0o700
    loaded = tables.load_parser(GRAMMAR, **OPTIONS)
    assert loaded is not built
    for f in EXAMPLES.glob("*.arg"):
        text = f.read_text()
        assert loaded.parse(text) == built.parse(text), f.name


def test_a_tampered_or_foreign_entry_is_rebuilt(cache: Path) -> None:
    tables.load_parser(GRAMMAR, **OPTIONS)
    entry = _entry(cache)
    good = json.loads(entry.read_text())
    # a payload changed without its hash, and one claiming another grammar's key
    for bad in ({**good, "payload": good["payload"].replace("NAME", "NAMX", 1)}, {**good, "key": "0" * 64},
                {"not": "an entry"}):
        entry.write_text(json.dumps(bad))
        p = tables.load_parser(GRAMMAR, **OPTIONS)
        assert p.parse("kernel k(A: f32[N]):\n    pass\n")
        again = json.loads(entry.read_text())  # rewritten from the grammar: a valid entry again
        assert again["key"] == good["key"] and again["sha256"] == hashlib.sha256(again["payload"].encode()).hexdigest()


def test_no_pickle_is_ever_loaded(cache: Path, tmp_path: Path) -> None:
    """Lark's cache=True file in the temp directory (the old attack) and a pickle in our cache are ignored."""
    marker = tmp_path / "pwned"
    code = f"open({str(marker)!r}, 'w').write('ran')"

    class Evil:
        def __reduce__(self):
            return (exec, (code,))

    blob = pickle.dumps(Evil())
    tmpdir = Path(tempfile.gettempdir())
    planted = [tmpdir / f".lark_cache_{i}.tmp" for i in range(3)]
    for p in planted:
        p.write_bytes(blob)
    cache.mkdir(parents=True, mode=0o700)
    (cache / "lalr-anything.pickle").write_bytes(blob)
    env = {**os.environ, "ARGUS_CACHE_DIR": str(cache.parent), "PYTHONPATH": str(ROOT)}
    try:
        p = subprocess.run([sys.executable, "-m", "argus.cli", "check", str(EXAMPLES / "gemm.arg"), "--no-verify"],
                           env=env, capture_output=True, text=True, timeout=120)
    finally:
        for f in planted:
            f.unlink(missing_ok=True)
    assert p.returncode == 0, p.stderr
    assert not marker.exists()
    src = (ROOT / "argus" / "dsl" / "parser.py").read_text() + (ROOT / "argus" / "dsl" / "tables.py").read_text()
    assert "import pickle" not in src and "cache=True," not in src and "cache=True)" not in src


def test_an_unsafe_cache_directory_means_building(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "grammar").symlink_to(victim)
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "root"))
    p = tables.load_parser(GRAMMAR, **OPTIONS)
    assert p.parse("kernel k(A: f32[N]):\n    pass\n") and list(victim.iterdir()) == []
