"""On-disk cache of NVRTC outputs, so `argus build/run/tune` recompile only what changed.

The cache is per user: ``<cache root>/nvrtc`` (``$ARGUS_CACHE_DIR``, else ``$XDG_CACHE_HOME/argus`` or
``~/.cache/argus``), a directory of mode 0700 owned by the user and checked each time it is opened
(argus.files.PrivateDir: no symlinks followed, files must be regular and the user's own). An entry is
``<key>.bin`` (the cubin or PTX) plus ``<key>.json`` (log, options, version, the key itself and the
binary's sha256), written binary first, metadata last, each through a temporary file and
``os.replace``: a reader sees a whole entry or none, also with several processes compiling at once.
The key hashes the whole CUDA source and everything else that determines the output, and an entry is
served only if its metadata names that key and its binary matches the recorded hash. Failures are not
cached.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
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
from argus.files import CACHE_ENV, PrivateDir, UnsafeDir, cache_root

__all__ = ["CACHE_ENV", "cache_dir", "cache_key", "compile_cached", "load", "store"]

_FORMAT = 2  # bump when the entry layout or what goes into the key changes
MAX_BINARY = 256 << 20
MAX_META = 16 << 20


def cache_dir() -> Path:
    return cache_root() / "nvrtc"


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


def _names(key: str) -> tuple[str, str]:
    return f"{key}.bin", f"{key}.json"


def load(key: str, *, root: Path | None = None) -> CompileResult | None:
    """The cached result for ``key`` (``cached=True``), or None when absent, unreadable or not trusted."""
    bin_name, meta_name = _names(key)
    try:
        with PrivateDir.open(root or cache_dir(), create=False) as d:
            raw_meta = d.read(meta_name, MAX_META)
            binary = d.read(bin_name, MAX_BINARY)
    except (UnsafeDir, OSError):
        return None
    if raw_meta is None or binary is None:
        return None
    try:
        meta = json.loads(raw_meta)
        if meta.get("format") != _FORMAT or meta.get("key") != key \
                or hashlib.sha256(binary).hexdigest() != meta.get("sha256"):
            return None  # torn, foreign or planted entry: recompile and overwrite
        return CompileResult(
            name=str(meta["name"]),
            arch=str(meta["arch"]),
            want=meta["want"],
            binary=binary,
            log=str(meta["log"]),
            options=tuple(str(o) for o in meta["options"]),
            nvrtc_version=(int(meta["nvrtc"][0]), int(meta["nvrtc"][1])),
            diagnostics=parse_log(str(meta["log"])),
            cached=True,
        )
    except (ValueError, KeyError, TypeError, IndexError, AttributeError):
        return None


def store(key: str, result: CompileResult, *, root: Path | None = None) -> None:
    bin_name, meta_name = _names(key)
    meta = {
        "format": _FORMAT,
        "key": key,
        "name": result.name,
        "arch": result.arch,
        "want": result.want,
        "log": result.log,
        "options": list(result.options),
        "nvrtc": list(result.nvrtc_version),
        "sha256": hashlib.sha256(result.binary).hexdigest(),
    }
    with PrivateDir.open(root or cache_dir()) as d:
        d.write(bin_name, result.binary)
        d.write(meta_name, json.dumps(meta).encode())


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
    except OSError:  # UnsafeDir included: a read-only, full or shared directory must not fail the build
        pass
    return dataclasses.replace(result, cached=False)
