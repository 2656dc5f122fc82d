"""Compile generated CUDA C++ with NVRTC (through ``cuda.bindings.nvrtc``).

The generated source carries ``#line N "kernel.arg"`` directives, so NVRTC reports front-end errors at
``.arg`` positions; :func:`parse_log` turns the log into :class:`Diagnostic` records that the DSL's
renderer can show under the offending ``.arg`` line.

This module imports nothing from the rest of ``argus``: ``isolate=True`` loads it by file path in a
child process (see :func:`_run_isolated`) so a ptxas crash cannot take the caller down, and that child
must not pay for (or break on) the package's other imports.
"""

from __future__ import annotations

import base64
import dataclasses
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Want = Literal["cubin", "ptx"]

DEFAULT_OPTIONS: tuple[str, ...] = ("-std=c++17",)

# Set in the child's environment by tests to prove that a crashing compiler is contained.
CRASH_ENV = "ARGUS_NVRTC_TEST_CRASH"


@dataclass(frozen=True)
class Diagnostic:
    """One message from the compile log; ``path``/``line`` follow the source's ``#line`` directives."""

    severity: str  # "error" | "warning" | "remark"
    message: str
    path: str | None = None
    line: int | None = None
    column: int | None = None  # 1-based, from NVRTC's caret line when it prints one
    code: str | None = None  # e.g. "177-D" for front-end warnings
    origin: str = "nvrtc"  # "nvrtc" (front end) or "ptxas"

    def __str__(self) -> str:
        where = ""
        if self.path is not None:
            where = self.path
            if self.line is not None:
                where += f":{self.line}"
                if self.column is not None:
                    where += f":{self.column}"
            where += ": "
        return f"{where}{self.severity}: {self.message}"


class CompileError(Exception):
    """NVRTC rejected the program, or the compiler process died (``crashed``)."""

    def __init__(
        self,
        message: str,
        *,
        log: str = "",
        diagnostics: Sequence[Diagnostic] = (),
        name: str | None = None,
        arch: str | None = None,
        crashed: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.log = log
        self.diagnostics = tuple(diagnostics)
        self.name = name
        self.arch = arch
        self.crashed = crashed

    @property
    def errors(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.severity == "error")

    def __str__(self) -> str:
        errs = self.errors
        if not errs:
            return self.message
        shown = "\n".join(f"  {d}" for d in errs[:10])
        more = f"\n  ... and {len(errs) - 10} more" if len(errs) > 10 else ""
        return f"{self.message}\n{shown}{more}"


@dataclass(frozen=True)
class CompileResult:
    name: str
    arch: str  # the architecture compiled for: sm_XX[a] for cubin, compute_XX[a] for ptx
    want: Want
    binary: bytes  # cubin image, or PTX text (UTF-8, no trailing NUL)
    log: str
    options: tuple[str, ...]  # every option NVRTC saw, defaults and include paths included
    nvrtc_version: tuple[int, int]
    diagnostics: tuple[Diagnostic, ...] = ()
    cached: bool = False

    @property
    def cubin(self) -> bytes:
        if self.want != "cubin":
            raise ValueError(f"{self.name}: compiled to {self.want}, not cubin")
        return self.binary

    @property
    def ptx(self) -> str:
        if self.want != "ptx":
            raise ValueError(f"{self.name}: compiled to {self.want}, not ptx")
        return self.binary.decode()

    @property
    def warnings(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.severity == "warning")


# --------------------------------------------------------------------------------------------------
# Headers, versions, architectures


def _wheel_include_dirs() -> list[Path]:
    """Header folders of the pip wheels (``nvidia-cuda-runtime``): cu13 layout first, then cu12."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    if spec is None or spec.submodule_search_locations is None:
        return []
    out = []
    for root in spec.submodule_search_locations:
        for sub in ("cu13/include", "cuda_runtime/include"):
            out.append(Path(root) / sub)
    return out


def cuda_include_dirs() -> tuple[str, ...]:
    """Folders holding the CUDA headers that generated code includes (``cuda_bf16.h`` ...).

    Order: $CUDA_HOME / $CUDA_PATH, the pip wheel, /usr/local/cuda. The first folder with
    ``cuda_fp16.h`` wins; an empty tuple means none was found (a kernel without includes still compiles).
    """
    candidates: list[Path] = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(var)
        if root:
            candidates.append(Path(root) / "include")
    candidates += _wheel_include_dirs()
    candidates.append(Path("/usr/local/cuda/include"))
    for c in candidates:
        if (c / "cuda_fp16.h").is_file():
            return (str(c),)
    return ()


def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise CompileError(
            "NVRTC is not available: install cuda-python and nvidia-cuda-nvrtc "
            f"(import cuda.bindings.nvrtc failed: {e})"
        ) from e
    return nvrtc


def nvrtc_version() -> tuple[int, int]:
    nvrtc = _nvrtc()
    err, major, minor = nvrtc.nvrtcVersion()
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise CompileError(f"nvrtcVersion failed: {err.name}")
    return (int(major), int(minor))


def supported_archs() -> tuple[int, ...]:
    """Compute capabilities (as 90, 80, ...) this NVRTC can target."""
    nvrtc = _nvrtc()
    err, archs = nvrtc.nvrtcGetSupportedArchs()
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise CompileError(f"nvrtcGetSupportedArchs failed: {err.name}")
    return tuple(int(a) for a in archs)


_ARCH_RE = re.compile(r"^(?:sm_|compute_)?(\d{2,3})([af]?)$")


def normalize_arch(arch: str, want: Want) -> str:
    """``sm_90a`` / ``compute_90a`` / ``90a`` -> ``sm_90a`` for cubin, ``compute_90a`` for ptx."""
    m = _ARCH_RE.match(arch.strip())
    if m is None:
        raise ValueError(f"unrecognised GPU architecture {arch!r} (expected e.g. 'sm_90a' or 'sm_80')")
    prefix = "sm_" if want == "cubin" else "compute_"
    return f"{prefix}{m.group(1)}{m.group(2)}"


def arch_for_capability(major: int, minor: int) -> str:
    # Hopper/Blackwell datacenter parts: the "a" variant unlocks wgmma / tcgen05, which argus emits.
    if (major, minor) in ((9, 0), (10, 0), (10, 3)):
        return f"sm_{major}{minor}a"
    return f"sm_{major}{minor}"


def detect_arch(device: int = 0) -> str | None:
    """The architecture of GPU ``device`` as ``sm_XX[a]``, or None without a GPU or driver."""
    try:
        from cuda.bindings import driver
    except ImportError:
        return None
    try:
        ok = driver.CUresult.CUDA_SUCCESS
        (err,) = driver.cuInit(0)
        if err != ok:
            return None
        err, count = driver.cuDeviceGetCount()
        if err != ok or device >= count:
            return None
        err, dev = driver.cuDeviceGet(device)
        if err != ok:
            return None
        attr = driver.CUdevice_attribute
        err, major = driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
        if err != ok:
            return None
        err, minor = driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
        if err != ok:
            return None
    except Exception:  # libcuda missing raises a loader error, not a CUresult
        return None
    return arch_for_capability(int(major), int(minor))


# --------------------------------------------------------------------------------------------------
# Log parsing

# "examples/x.arg(8): error: expected an expression", "k.cu(1): catastrophic error: ...",
# "e.arg(3): warning #177-D: variable ..."
_FRONTEND_RE = re.compile(
    r"^(?P<path>.+?)\((?P<line>\d+)\): (?P<sev>catastrophic error|error|warning|remark)"
    r"(?: #(?P<code>[\w-]+))?: (?P<msg>.*)$"
)
# "ptxas application ptx input, line 27; error   : Unknown modifier '.instr'"
_PTXAS_RE = re.compile(r"^ptxas (?P<where>.*?), line (?P<line>\d+); (?P<sev>error|warning)\s*: (?P<msg>.*)$")
# "ptxas fatal   : ...", "nvrtc: error: ...", "error: ..."
_BARE_RE = re.compile(r"^(?:(?P<tool>ptxas|nvrtc|nvlink)\s*[:]?\s*)?(?P<sev>fatal|error|warning)\s*: (?P<msg>.*)$")


def parse_log(log: str) -> tuple[Diagnostic, ...]:
    """Structured diagnostics from an NVRTC log (front end, ptxas and option errors)."""
    out: list[Diagnostic] = []
    lines = log.replace("\x00", "").splitlines()
    i = 0
    while i < len(lines):
        text = lines[i]
        m = _FRONTEND_RE.match(text)
        if m:
            column = None
            # NVRTC echoes the source line indented by two spaces, then a caret line under it.
            if i + 2 < len(lines) and lines[i + 2].strip() == "^" and lines[i + 1].startswith("  "):
                column = lines[i + 2].index("^") - 2 + 1
                i += 2
            sev = "error" if m.group("sev") == "catastrophic error" else m.group("sev")
            out.append(
                Diagnostic(
                    severity=sev,
                    message=m.group("msg").strip(),
                    path=m.group("path"),
                    line=int(m.group("line")),
                    column=column if column and column > 0 else None,
                    code=m.group("code"),
                )
            )
            i += 1
            continue
        m = _PTXAS_RE.match(text)
        if m:
            out.append(
                Diagnostic(
                    severity=m.group("sev"),
                    message=m.group("msg").strip(),
                    path="<ptx>",
                    line=int(m.group("line")),
                    origin="ptxas",
                )
            )
        else:
            m = _BARE_RE.match(text.strip())
            if m and not text.startswith("ptxas info"):
                sev = "error" if m.group("sev") == "fatal" else m.group("sev")
                tool = m.group("tool") or "nvrtc"
                out.append(Diagnostic(severity=sev, message=m.group("msg").strip(), origin=tool))
        i += 1
    return tuple(out)


_PTX_FILE_RE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]*)"')
_PTX_LOC_RE = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)\s+(\d+)")
_PTX_DEBUG_LINE_RE = re.compile(r"^\s*\.(?:loc|file)\b")


_LINE_DIRECTIVE_RE = re.compile(r'^\s*#\s*line\s+\d+\s+"([^"]+)"', re.MULTILINE)


def map_ptx_lines(
    ptx: str,
    diagnostics: Iterable[Diagnostic],
    source: str = "",
    program: str | None = None,
    seen_ptx: str | None = None,
) -> tuple[Diagnostic, ...]:
    """Move ptxas diagnostics from PTX line numbers to the source position of the nearest ``.loc``.

    ``ptx`` must come from ``-lineinfo`` (``.file``/``.loc`` follow the ``#line`` directives). When ptxas
    saw PTX without line info (``seen_ptx``), its line numbers are translated first: the two differ
    only by the ``.loc``/``.file`` lines, which is checked, and nothing is mapped if they differ more.
    NVRTC makes relative ``#line`` paths absolute in ``.file``; they are put back as the source wrote them.
    """
    lines = ptx.splitlines()
    if seen_ptx is None:
        index = list(range(len(lines)))
    else:
        index = [k for k, ln in enumerate(lines) if not _PTX_DEBUG_LINE_RE.match(ln)]
        if [lines[k] for k in index] != seen_ptx.splitlines():
            return tuple(diagnostics)
    written = set(_LINE_DIRECTIVE_RE.findall(source)) | ({program} if program else set())
    files: dict[int, str] = {}
    for ln in lines:
        m = _PTX_FILE_RE.match(ln)
        if m:
            path = m.group(2)
            if path not in written:
                path = next((w for w in written if path.endswith("/" + w)), path)
            files[int(m.group(1))] = path
    out = []
    for d in diagnostics:
        if d.origin != "ptxas" or d.path != "<ptx>" or d.line is None or not 0 < d.line <= len(index):
            out.append(d)
            continue
        mapped = d
        for k in range(index[d.line - 1], -1, -1):
            m = _PTX_LOC_RE.match(lines[k])
            if m and int(m.group(1)) in files and int(m.group(2)) > 0:
                mapped = dataclasses.replace(
                    d,
                    path=files[int(m.group(1))],
                    line=int(m.group(2)),
                    column=int(m.group(3)) or None,
                    message=f"{d.message} (ptxas, PTX line {d.line})",
                )
                break
        out.append(mapped)
    return tuple(out)


# --------------------------------------------------------------------------------------------------
# Compilation


def effective_options(
    arch: str, want: Want, options: Sequence[str] = (), include_dirs: Sequence[str] | None = None
) -> tuple[str, ...]:
    """The exact option list handed to NVRTC (also what the cache key hashes)."""
    target = normalize_arch(arch, want)
    incs = cuda_include_dirs() if include_dirs is None else tuple(include_dirs)
    opts = [f"--gpu-architecture={target}", *DEFAULT_OPTIONS, *(f"--include-path={d}" for d in incs)]
    if want == "cubin" and not any(o.startswith(("--ptxas-options", "-Xptxas")) and "-v" in o for o in options):
        # ptxas -v echoes registers/smem/spills into the program log (read by codegen.resources).
        opts.append("--ptxas-options=-v")
    if nvrtc_version() >= (12, 9) and "--no-cache" not in options:
        # NVRTC 12.9+ caches its output (in ~/.nv/ComputeCache when a driver is present, seen with
        # 13.0 on the H200), and a hit returns an empty log: no ptxas report, no warnings. argus keeps
        # its own cache with the log (codegen.cache), so NVRTC's is switched off.
        opts.append("--no-cache")
    opts += list(options)
    return tuple(opts)


def _program_log(nvrtc, prog) -> str:
    err, size = nvrtc.nvrtcGetProgramLogSize(prog)
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS or size <= 1:
        return ""
    buf = b" " * size
    nvrtc.nvrtcGetProgramLog(prog, buf)
    return buf.rstrip(b"\x00").decode(errors="replace")


def _program_output(nvrtc, prog, want: Want) -> bytes:
    if want == "cubin":
        err, size = nvrtc.nvrtcGetCUBINSize(prog)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS or size == 0:
            raise CompileError("NVRTC produced no cubin: compile for a real architecture (sm_XX), not a virtual one")
        buf = b" " * size
        (err,) = nvrtc.nvrtcGetCUBIN(prog, buf)
    else:
        err, size = nvrtc.nvrtcGetPTXSize(prog)
        buf = b" " * size
        (err,) = nvrtc.nvrtcGetPTX(prog, buf)
        buf = buf.rstrip(b"\x00")
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise CompileError(f"reading NVRTC {want} failed: {err.name}")
    return bytes(buf)


def _program_name(name: str) -> str:
    return name if name.endswith((".cu", ".cuh", ".cpp")) else f"{name}.cu"


def _compile_raw(source: str, name: str, opts: tuple[str, ...], want: Want) -> tuple[bool, bytes, str, str]:
    """One in-process NVRTC run: (ok, output, log, nvrtc result name)."""
    nvrtc = _nvrtc()
    ok = nvrtc.nvrtcResult.NVRTC_SUCCESS
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), _program_name(name).encode(), 0, [], [])
    if err != ok:
        raise CompileError(f"nvrtcCreateProgram failed: {err.name}", name=name)
    try:
        encoded = [o.encode() for o in opts]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(encoded), encoded)
        log = _program_log(nvrtc, prog)
        if err != ok:
            return False, b"", log, err.name
        return True, _program_output(nvrtc, prog, want), log, err.name
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _failure(
    source: str, name: str, target: str, opts: tuple[str, ...], want: Want, log: str, status: str
) -> CompileError:
    diags = parse_log(log)
    if want == "cubin" and any(d.origin == "ptxas" and d.path == "<ptx>" for d in diags):
        # ptxas speaks PTX line numbers: regenerate the PTX it saw, and once more with -lineinfo, to
        # map them back to the #line positions (PTX generation does not run ptxas: no crash risk).
        rest = tuple(o for o in opts if not o.startswith(("--gpu-architecture", "--ptxas-options")))
        arch_opt = f"--gpu-architecture={normalize_arch(target, 'ptx')}"
        try:
            ok, seen, _, _ = _compile_raw(source, name, (arch_opt, *rest), "ptx")
            seen_ptx = seen.decode(errors="replace")
            if ok and "-lineinfo" in rest:
                diags = map_ptx_lines(seen_ptx, diags, source, _program_name(name))
            elif ok:
                ok, li, _, _ = _compile_raw(source, name, (arch_opt, "-lineinfo", *rest), "ptx")
                if ok:
                    li_ptx = li.decode(errors="replace")
                    diags = map_ptx_lines(li_ptx, diags, source, _program_name(name), seen_ptx)
        except CompileError:
            pass
    n_err = sum(d.severity == "error" for d in diags)
    summary = f"{n_err} error{'s' if n_err != 1 else ''}" if n_err else status
    return CompileError(
        f"NVRTC failed to compile {name} for {target}: {summary}",
        log=log,
        diagnostics=diags,
        name=name,
        arch=target,
    )


def compile_cuda(
    source: str,
    *,
    name: str,
    arch: str = "sm_90a",
    options: Sequence[str] = (),
    want: Want = "cubin",
    include_dirs: Sequence[str] | None = None,
    isolate: bool = False,
    timeout: float | None = 600.0,
) -> CompileResult:
    """Compile CUDA C++ ``source`` to a cubin (``sm_XX``) or PTX (``compute_XX``).

    ``name`` names the program (diagnostics without a ``#line`` use it). ``options`` are extra NVRTC
    options (e.g. ``-DBM=128``, ``-lineinfo``, ``--maxrregcount=168``). ``isolate`` compiles in a child
    process: NVRTC's ptxas has segfaulted on some wgmma code, and a crash then raises
    :class:`CompileError` (``crashed=True``) instead of killing this process.
    """
    if want not in ("cubin", "ptx"):
        raise ValueError(f"want must be 'cubin' or 'ptx', not {want!r}")
    target = normalize_arch(arch, want)
    opts = effective_options(arch, want, options, include_dirs)
    if isolate:
        return _run_isolated(source, name=name, target=target, opts=opts, want=want, timeout=timeout)
    ok, output, log, status = _compile_raw(source, name, opts, want)
    if not ok:
        raise _failure(source, name, target, opts, want, log, status)
    return CompileResult(
        name=name,
        arch=target,
        want=want,
        binary=output,
        log=log,
        options=opts,
        nvrtc_version=nvrtc_version(),
        diagnostics=parse_log(log),
    )


# --------------------------------------------------------------------------------------------------
# Isolated compilation (child process)

_CHILD_BOOTSTRAP = (
    "import importlib.util, sys\n"
    "spec = importlib.util.spec_from_file_location('_argus_nvrtc_child', sys.argv[1])\n"
    "mod = importlib.util.module_from_spec(spec)\n"
    "sys.modules[spec.name] = mod\n"
    "spec.loader.exec_module(mod)\n"
    "mod._child_main()\n"
)


def _child_main() -> None:
    """Entry point of the isolated compiler: JSON request on stdin, JSON reply on stdout."""
    import faulthandler

    faulthandler.enable()  # a segfault then leaves a stack on stderr for the parent's message
    req = json.loads(sys.stdin.read())
    # Keep the reply channel private: anything the compiler libraries print on fd 1 goes to stderr.
    sys.stdout.flush()
    reply_fd = os.dup(1)
    os.dup2(2, 1)
    if os.environ.get(CRASH_ENV):
        os.abort()
    reply: dict[str, object]
    try:
        ok, output, log, status = _compile_raw(req["source"], req["name"], tuple(req["options"]), req["want"])
        reply = {
            "ok": ok,
            "binary": base64.b64encode(output).decode(),
            "log": log,
            "status": status,
            "version": list(nvrtc_version()),
        }
    except CompileError as e:
        reply = {"ok": False, "binary": "", "log": e.log, "status": e.message, "version": [0, 0]}
    with os.fdopen(reply_fd, "w") as out:
        out.write(json.dumps(reply))


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def _run_isolated(
    source: str, *, name: str, target: str, opts: tuple[str, ...], want: Want, timeout: float | None
) -> CompileResult:
    request = json.dumps({"source": source, "name": name, "options": list(opts), "want": want})
    cmd = [sys.executable, "-c", _CHILD_BOOTSTRAP, str(Path(__file__).resolve())]
    try:
        proc = subprocess.run(cmd, input=request, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise CompileError(
            f"compiler timed out after {timeout} s compiling {name} for {target}",
            name=name,
            arch=target,
            crashed=True,
        ) from e
    if proc.returncode != 0:
        how = _signal_name(proc.returncode) if proc.returncode < 0 else f"exit status {proc.returncode}"
        tail = proc.stderr.strip()[-2000:]
        raise CompileError(
            f"compiler crashed ({how}) compiling {name} for {target}"
            + (f"; its stderr ends with:\n{tail}" if tail else ""),
            log=proc.stderr,
            name=name,
            arch=target,
            crashed=True,
        )
    try:
        reply = json.loads(proc.stdout)
    except json.JSONDecodeError as e:
        raise CompileError(
            f"compiler process for {name} returned no result: {proc.stdout[-500:]!r}",
            log=proc.stderr,
            name=name,
            arch=target,
            crashed=True,
        ) from e
    log = reply["log"]
    if "ptxas info" not in log:
        # Some NVRTC builds print the ptxas -v report on the process's stdio instead of the log.
        stray = [ln for ln in proc.stderr.splitlines() if ln.startswith("ptxas")]
        if stray:
            log = (log + "\n" if log else "") + "\n".join(stray) + "\n"
    if not reply["ok"]:
        raise _failure(source, name, target, opts, want, log, reply["status"])
    return CompileResult(
        name=name,
        arch=target,
        want=want,
        binary=base64.b64decode(reply["binary"]),
        log=log,
        options=opts,
        nvrtc_version=(int(reply["version"][0]), int(reply["version"][1])),
        diagnostics=parse_log(log),
    )


if __name__ == "__main__":  # `python argus/codegen/nvrtc.py` serves one isolated compile request
    _child_main()
