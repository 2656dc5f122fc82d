"""On-disk cache of NVRTC outputs, so `argus build/run/tune` recompile only what changed.

An entry is ``<dir>/<key[:2]>/<key>.bin`` (the cubin or PTX) plus ``<key>.json`` (log, options, version),
written binary first, metadata last, each through a temporary file and ``os.replace``: a reader sees a
whole entry or none, also with several processes compiling at once. Failures are not cached.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from argus.codegen.nvrtc import (
    CompileResult,
    Want,
    compile_cuda,
    effective_options,
    normalize_arch,
    nvrtc_version,
    parse_log,
)

CACHE_ENV = "ARGUS_CACHE_DIR"
_FORMAT = 1  # bump when the entry layout or what goes into the key changes


def cache_dir() -> Path:
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "argus"


def cache_key(
    source: str,
    *,
    arch: str,
    options: Sequence[str],
    want: Want,
    version: tuple[int, int] | None = None,
) -> str:
    """sha256 of everything that determines the output: source, sorted options, arch, NVRTC, want."""
    payload = {
        "format": _FORMAT,
        "source": source,
        "options": sorted(options),
        "arch": normalize_arch(arch, want),
        "nvrtc": list(version if version is not None else nvrtc_version()),
        "want": want,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _paths(root: Path, key: str) -> tuple[Path, Path]:
    d = root / key[:2]
    return d / f"{key}.bin", d / f"{key}.json"


def load(key: str, *, root: Path | None = None) -> CompileResult | None:
    """The cached result for ``key`` (``cached=True``), or None when absent or unreadable."""
    bin_path, meta_path = _paths(root or cache_dir(), key)
    try:
        meta = json.loads(meta_path.read_text())
        binary = bin_path.read_bytes()
    except (OSError, ValueError):
        return None
    if meta.get("format") != _FORMAT or hashlib.sha256(binary).hexdigest() != meta.get("sha256"):
        return None  # torn or foreign entry: recompile and overwrite
    return CompileResult(
        name=meta["name"],
        arch=meta["arch"],
        want=meta["want"],
        binary=binary,
        log=meta["log"],
        options=tuple(meta["options"]),
        nvrtc_version=(int(meta["nvrtc"][0]), int(meta["nvrtc"][1])),
        diagnostics=parse_log(meta["log"]),
        cached=True,
    )


def store(key: str, result: CompileResult, *, root: Path | None = None) -> None:
    bin_path, meta_path = _paths(root or cache_dir(), key)
    meta = {
        "format": _FORMAT,
        "name": result.name,
        "arch": result.arch,
        "want": result.want,
        "log": result.log,
        "options": list(result.options),
        "nvrtc": list(result.nvrtc_version),
        "sha256": hashlib.sha256(result.binary).hexdigest(),
    }
    _atomic_write(bin_path, result.binary)
    _atomic_write(meta_path, json.dumps(meta).encode())


def compile_cached(
    source: str,
    *,
    name: str,
    arch: str = "sm_90a",
    options: Sequence[str] = (),
    want: Want = "cubin",
    include_dirs: Sequence[str] | None = None,
    isolate: bool = False,
    timeout: float | None = 600.0,
    root: Path | str | None = None,
) -> CompileResult:
    """:func:`compile_cuda` through the disk cache; ``result.cached`` tells whether NVRTC ran.

    The key hashes the effective option list (defaults and include paths included), so a change of
    CUDA headers location or of argus's default options is a miss, not a stale hit.
    """
    opts = effective_options(arch, want, options, include_dirs)
    key = cache_key(source, arch=arch, options=opts, want=want)
    base = Path(root) if root is not None else cache_dir()
    hit = load(key, root=base)
    if hit is not None:
        return dataclasses.replace(hit, name=name)
    result = compile_cuda(
        source,
        name=name,
        arch=arch,
        options=options,
        want=want,
        include_dirs=include_dirs,
        isolate=isolate,
        timeout=timeout,
    )
    try:
        store(key, result, root=base)
    except OSError:
        pass  # a read-only or full cache directory must not fail the build
    return dataclasses.replace(result, cached=False)
