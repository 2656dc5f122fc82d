"""Per-kernel resource usage of a compiled cubin: registers, shared memory, stack, spills.

Two sources, neither needs a GPU:

* the ptxas ``-v`` report that NVRTC echoes into the program log (``compile_cuda`` asks for it on
  every cubin compile). It is the only source of spill counts.
* the cubin itself (an ELF file): ``EIATTR_REGCOUNT`` / ``EIATTR_FRAME_SIZE`` / ``EIATTR_MAX_STACK_SIZE``
  records in ``.nv.info``, launch bounds in ``.nv.info.<kernel>``, and the size of the
  ``.nv.shared.<kernel>`` section. Used when no log is at hand and to fill what the log lacks.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from argus.codegen.nvrtc import CompileResult


@dataclass(frozen=True)
class KernelResources:
    name: str  # entry symbol (mangled unless the kernel is extern "C")
    registers: int  # per thread
    static_smem_bytes: int  # per block, static __shared__ only (dynamic smem is a launch argument)
    stack_frame_bytes: int  # per thread local memory: spills plus local arrays
    spill_store_bytes: int | None = None  # None: not known (cubin without a ptxas log)
    spill_load_bytes: int | None = None
    barriers: int | None = None  # named barriers used
    const_bytes: int | None = None  # cmem[0]: kernel parameters and driver constants
    max_threads: int | None = None  # from __launch_bounds__ / .maxntid, when given
    arch: str | None = None
    source: str = "ptxas"  # "ptxas", "elf" or "ptxas+elf"

    @property
    def spills(self) -> bool:
        return bool(self.spill_store_bytes or self.spill_load_bytes)

    def summary(self) -> str:
        spill = (
            "spills unknown"
            if self.spill_store_bytes is None
            else f"{self.spill_store_bytes} B spill stores, {self.spill_load_bytes} B spill loads"
        )
        return (
            f"{self.name}: {self.registers} registers, {self.static_smem_bytes} B smem, "
            f"{self.stack_frame_bytes} B stack, {spill}"
        )


# --------------------------------------------------------------------------------------------------
# ptxas -v log

_ENTRY_RE = re.compile(r"Compiling entry function '([^']+)' for '(\w+)'")
_PROPS_RE = re.compile(r"Function properties for (\S+)")
_FRAME_RE = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED_RE = re.compile(r"Used (\d+) registers")
_BARRIERS_RE = re.compile(r"used (\d+) barriers")
_SMEM_RE = re.compile(r"(\d+) bytes smem")
_CMEM_RE = re.compile(r"(\d+) bytes cmem\[0\]")


def parse_ptxas_log(log: str) -> dict[str, KernelResources]:
    """Resources of each entry function reported by ``ptxas -v`` in ``log`` (empty without a report)."""
    frames: dict[str, tuple[int, int, int]] = {}
    used: dict[str, str] = {}
    archs: dict[str, str] = {}
    entry: str | None = None
    props_for: str | None = None
    for line in log.replace("\x00", "").splitlines():
        if not line.startswith("ptxas"):
            continue
        if m := _ENTRY_RE.search(line):
            entry, props_for = m.group(1), None
            archs[entry] = m.group(2)
        elif m := _PROPS_RE.search(line):
            # Also printed for non-inlined device functions; the frame line that follows is theirs.
            props_for = m.group(1)
        elif m := _FRAME_RE.search(line):
            if props_for is not None:
                frames[props_for] = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
        elif _USED_RE.search(line) and entry is not None:
            used[entry] = line
    out: dict[str, KernelResources] = {}
    for name, line in used.items():
        frame, st, ld = frames.get(name, (0, 0, 0))

        def num(rx: re.Pattern[str], text: str = line) -> int | None:
            m = rx.search(text)
            return int(m.group(1)) if m else None

        out[name] = KernelResources(
            name=name,
            registers=num(_USED_RE) or 0,
            static_smem_bytes=num(_SMEM_RE) or 0,  # ptxas omits the field when it is 0
            stack_frame_bytes=frame,
            spill_store_bytes=st,
            spill_load_bytes=ld,
            barriers=num(_BARRIERS_RE),
            const_bytes=num(_CMEM_RE),
            arch=archs.get(name),
            source="ptxas",
        )
    return out


# --------------------------------------------------------------------------------------------------
# cubin (ELF) reader

# .nv.info record formats and the attributes read here (values seen in NVRTC 12/13 cubins).
_EIFMT_NVAL, _EIFMT_BVAL, _EIFMT_HVAL, _EIFMT_SVAL = 1, 2, 3, 4
_EIATTR_MAX_THREADS = 0x05
_EIATTR_FRAME_SIZE = 0x11
_EIATTR_MAX_STACK_SIZE = 0x23
_EIATTR_REGCOUNT = 0x2F
_SHT_SYMTAB = 2
_STT_FUNC = 2
_STO_CUDA_ENTRY = 0x10
# On sm_90+ ptxas places a 1 KiB system-reserved window at the start of each kernel's .nv.shared
# section (it then declares the .nv.reservedSmem.offset0 symbol); ptxas -v does not count it.
_RESERVED_SMEM_SYMBOL = ".nv.reservedSmem.offset0"
_RESERVED_SMEM_BYTES = 1024


class CubinFormatError(ValueError):
    pass


@dataclass(frozen=True)
class _Section:
    name: str
    type: int
    offset: int
    size: int
    link: int
    info: int


def _sections(data: bytes) -> list[_Section]:
    if data[:4] != b"\x7fELF":
        raise CubinFormatError("not an ELF file (a cubin was expected)")
    if data[4] != 2 or data[5] != 1:
        raise CubinFormatError("only 64-bit little-endian cubins are supported")
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    raw = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    strtab_off = raw[shstrndx][4]

    def cstr(off: int) -> str:
        end = data.index(b"\x00", off)
        return data[off:end].decode(errors="replace")

    return [_Section(cstr(strtab_off + r[0]), r[1], r[4], r[5], r[6], r[7]) for r in raw]


def _symbols(data: bytes, secs: list[_Section]) -> list[tuple[str, int, int]]:
    """(name, type, st_other) of each symbol, in symbol-table order."""
    out: list[tuple[str, int, int]] = []
    for s in secs:
        if s.type != _SHT_SYMTAB:
            continue
        strtab = secs[s.link]
        for k in range(s.size // 24):
            name_off, info, other, _shndx, _value, _size = struct.unpack_from("<IBBHQQ", data, s.offset + 24 * k)
            start = strtab.offset + name_off
            name = data[start : data.index(b"\x00", start)].decode(errors="replace")
            out.append((name, info & 0xF, other))
    return out


def _nv_info(data: bytes, sec: _Section) -> list[tuple[int, int, bytes]]:
    """(attribute, format, payload) records of a .nv.info section."""
    out = []
    off, end = sec.offset, sec.offset + sec.size
    while off + 2 <= end:
        fmt, attr = data[off], data[off + 1]
        if fmt == _EIFMT_SVAL:
            (n,) = struct.unpack_from("<H", data, off + 2)
            out.append((attr, fmt, data[off + 4 : off + 4 + n]))
            off += 4 + n
        elif fmt in (_EIFMT_HVAL, _EIFMT_BVAL):
            out.append((attr, fmt, data[off + 2 : off + 4]))
            off += 4
        elif fmt == _EIFMT_NVAL:
            out.append((attr, fmt, b""))
            off += 4  # records are 4-byte aligned even without a value
        else:
            raise CubinFormatError(f"unknown .nv.info record format {fmt} in {sec.name}")
    return out


def parse_cubin(cubin: bytes) -> dict[str, KernelResources]:
    """Resources of each kernel in a cubin, read from its ELF sections (no spill counts)."""
    data = bytes(cubin)
    secs = _sections(data)
    syms = _symbols(data, secs)
    by_name = {s.name: s for s in secs}
    reserved = any(name == _RESERVED_SMEM_SYMBOL for name, _, _ in syms)
    # Entry points (kernels) are function symbols flagged STO_CUDA_ENTRY; device functions are not.
    kernels = [name for name, typ, other in syms if typ == _STT_FUNC and other & _STO_CUDA_ENTRY]

    per_sym: dict[int, dict[int, int]] = {}  # symbol index -> attribute -> value
    glob = by_name.get(".nv.info")
    if glob is not None:
        for attr, fmt, payload in _nv_info(data, glob):
            if fmt == _EIFMT_SVAL and len(payload) >= 8:
                sym, value = struct.unpack_from("<II", payload)
                per_sym.setdefault(sym, {})[attr] = value
    sym_index = {name: i for i, (name, typ, _) in enumerate(syms) if typ == _STT_FUNC}

    out: dict[str, KernelResources] = {}
    for k in kernels:
        attrs = per_sym.get(sym_index.get(k, -1), {})
        shared = by_name.get(f".nv.shared.{k}")
        smem = shared.size if shared is not None else 0
        if reserved and smem >= _RESERVED_SMEM_BYTES:
            smem -= _RESERVED_SMEM_BYTES
        max_threads = None
        info = by_name.get(f".nv.info.{k}")
        if info is not None:
            for attr, fmt, payload in _nv_info(data, info):
                if attr == _EIATTR_MAX_THREADS and fmt == _EIFMT_SVAL and len(payload) >= 12:
                    x, y, z = struct.unpack_from("<III", payload)
                    max_threads = x * y * z
        out[k] = KernelResources(
            name=k,
            registers=attrs.get(_EIATTR_REGCOUNT, 0),
            static_smem_bytes=smem,
            stack_frame_bytes=attrs.get(_EIATTR_FRAME_SIZE, 0),
            max_threads=max_threads,
            source="elf",
        )
    return out


def _merge(log: Mapping[str, KernelResources], elf: Mapping[str, KernelResources]) -> dict[str, KernelResources]:
    out: dict[str, KernelResources] = {}
    for name in {**elf, **log}:
        a, b = log.get(name), elf.get(name)
        if a is None:
            assert b is not None
            out[name] = b
        elif b is None:
            out[name] = a
        else:
            out[name] = replace(a, max_threads=a.max_threads or b.max_threads, source="ptxas+elf")
    return out


def kernel_resources(result: CompileResult) -> dict[str, KernelResources]:
    """Resources of every kernel of a cubin ``CompileResult`` (ptxas report, completed from the ELF)."""
    if result.want != "cubin":
        raise ValueError(f"{result.name}: resources need a cubin, this result holds {result.want}")
    log = parse_ptxas_log(result.log)
    elf = parse_cubin(result.binary)
    merged = _merge(log, elf)
    return {k: v if v.arch else replace(v, arch=result.arch) for k, v in merged.items()}
