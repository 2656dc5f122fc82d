"""The on-disk compile cache: hits, keys, atomic entries. No GPU needed."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

pytest.importorskip("cuda.bindings.nvrtc")

from argus.codegen import cache  # noqa: E402
from argus.codegen.cache import cache_key, compile_cached  # noqa: E402
from argus.codegen.nvrtc import CompileError, effective_options  # noqa: E402
from argus.codegen.resources import kernel_resources  # noqa: E402

SRC = r"""
#include <cuda_bf16.h>
extern "C" __global__ void scale(__nv_bfloat16* x, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = __float2bfloat16(s * __bfloat162float(x[i]));
}
"""


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "argus-cache"
    monkeypatch.setenv(cache.CACHE_ENV, str(d))
    return d


def _entries(d: Path) -> list[Path]:
    return sorted(p for p in (d / "nvrtc").rglob("*") if p.is_file())


def test_second_compile_is_a_hit(cache_dir: Path) -> None:
    first = compile_cached(SRC, name="scale", arch="sm_90a")
    second = compile_cached(SRC, name="scale", arch="sm_90a")
    assert not first.cached and second.cached
    assert first.binary == second.binary
    assert first.log == second.log and first.options == second.options
    assert first.nvrtc_version == second.nvrtc_version
    # The resource report works from a cached entry too (it keeps the ptxas log).
    assert kernel_resources(second) == kernel_resources(first)
    files = _entries(cache_dir)
    assert [p.suffix for p in files] == [".bin", ".json"]
    assert not any(p.name.endswith(".tmp") for p in files)


def test_ptx_is_cached_separately(cache_dir: Path) -> None:
    cubin = compile_cached(SRC, name="scale", arch="sm_80")
    ptx = compile_cached(SRC, name="scale", arch="sm_80", want="ptx")
    assert not ptx.cached and ptx.ptx.lstrip().startswith("//")
    assert compile_cached(SRC, name="scale", arch="sm_80", want="ptx").cached
    assert cubin.binary != ptx.binary


def test_key_depends_on_what_changes_the_output() -> None:
    v = (13, 0)
    base = cache_key(SRC, arch="sm_90a", options=("-DA=1", "-DB=2"), want="cubin", version=v)
    assert base == cache_key(SRC, arch="sm_90a", options=("-DB=2", "-DA=1"), want="cubin", version=v)
    assert base == cache_key(SRC, arch="90a", options=("-DA=1", "-DB=2"), want="cubin", version=v)
    others = {
        cache_key(SRC + " ", arch="sm_90a", options=("-DA=1", "-DB=2"), want="cubin", version=v),
        cache_key(SRC, arch="sm_80", options=("-DA=1", "-DB=2"), want="cubin", version=v),
        cache_key(SRC, arch="sm_90a", options=("-DA=1",), want="cubin", version=v),
        cache_key(SRC, arch="sm_90a", options=("-DA=1", "-DB=2"), want="ptx", version=v),
        cache_key(SRC, arch="sm_90a", options=("-DA=1", "-DB=2"), want="cubin", version=(13, 1)),
    }
    assert base not in others and len(others) == 5


def test_options_and_arch_miss(cache_dir: Path) -> None:
    assert not compile_cached(SRC, name="scale", arch="sm_90a").cached
    assert not compile_cached(SRC, name="scale", arch="sm_90a", options=("-DX=1",)).cached
    assert not compile_cached(SRC, name="scale", arch="sm_80").cached
    assert compile_cached(SRC, name="scale", arch="sm_90a", options=("-DX=1",)).cached
    assert len(_entries(cache_dir)) == 6


def test_corrupt_entry_is_recompiled(cache_dir: Path) -> None:
    first = compile_cached(SRC, name="scale")
    (bin_path,) = (cache_dir / "nvrtc").rglob("*.bin")
    bin_path.write_bytes(b"torn")
    again = compile_cached(SRC, name="scale")
    assert not again.cached and again.binary == first.binary
    assert compile_cached(SRC, name="scale").cached


def test_failures_are_not_cached(cache_dir: Path) -> None:
    for _ in range(2):
        with pytest.raises(CompileError):
            compile_cached("this is not C++", name="bad")
    assert _entries(cache_dir) == []


def test_explicit_root_and_name(tmp_path: Path) -> None:
    compile_cached(SRC, name="one", root=tmp_path)
    hit = compile_cached(SRC, name="two", root=tmp_path)
    assert hit.cached and hit.name == "two"
    key = cache_key(SRC, arch="sm_90a", options=effective_options("sm_90a", "cubin"), want="cubin")
    assert (tmp_path / f"{key}.bin").is_file()


def test_default_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(cache.CACHE_ENV, raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert cache.cache_dir() == Path.home() / ".cache" / "argus" / "nvrtc"
    monkeypatch.setenv("XDG_CACHE_HOME", "/somewhere")
    assert cache.cache_dir() == Path("/somewhere/argus/nvrtc")


def _key() -> str:
    return cache_key(SRC, arch="sm_90a", options=effective_options("sm_90a", "cubin"), want="cubin")


def test_cache_directory_is_private(cache_dir: Path) -> None:
    compile_cached(SRC, name="scale")
    for d in (cache_dir, cache_dir / "nvrtc"):
        assert d.stat().st_mode & 0o777 == 0o700
    assert all(p.stat().st_mode & 0o077 == 0 for p in _entries(cache_dir))


def test_a_planted_entry_with_a_matching_checksum_is_not_served(cache_dir: Path) -> None:
    """The checksum beside a binary proves nothing: the metadata must name the key it was stored for."""
    first = compile_cached(SRC, name="scale")
    key = _key()
    other = cache_key(SRC + "// other", arch="sm_90a", options=effective_options("sm_90a", "cubin"), want="cubin")
    d = cache_dir / "nvrtc"
    evil = b"\x7fELF planted"
    meta = json.loads((d / f"{key}.json").read_text())
    meta.update(sha256=hashlib.sha256(evil).hexdigest(), key=other)  # consistent checksum, wrong key
    (d / f"{key}.bin").write_bytes(evil)
    (d / f"{key}.json").write_text(json.dumps(meta))
    again = compile_cached(SRC, name="scale")
    assert not again.cached and again.binary == first.binary


def test_symlinked_entries_and_directories_are_not_followed(cache_dir: Path, tmp_path: Path) -> None:
    first = compile_cached(SRC, name="scale")
    key = _key()
    d = cache_dir / "nvrtc"
    outside = tmp_path / "outside"
    outside.mkdir()
    for suffix in (".bin", ".json"):
        (outside / f"{key}{suffix}").write_bytes((d / f"{key}{suffix}").read_bytes())
        (d / f"{key}{suffix}").unlink()
        (d / f"{key}{suffix}").symlink_to(outside / f"{key}{suffix}")
    assert cache.load(key) is None  # a link is not an entry, even one pointing at a valid copy
    # A cache directory replaced by a link elsewhere (or owned by someone else) is not used at all.
    victim = tmp_path / "victim"
    victim.mkdir()
    linked = tmp_path / "linked-cache"
    linked.symlink_to(victim)
    res = compile_cached(SRC, name="scale", root=linked)
    assert not res.cached and res.binary == first.binary and list(victim.iterdir()) == []


def test_a_cache_readable_by_others_is_made_private(cache_dir: Path) -> None:
    d = cache_dir / "nvrtc"
    d.mkdir(parents=True)
    d.chmod(0o777)
    compile_cached(SRC, name="scale")
    assert d.stat().st_mode & 0o777 == 0o700 and compile_cached(SRC, name="scale").cached
