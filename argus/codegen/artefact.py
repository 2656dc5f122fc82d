"""`argus build`: write the generated CUDA, PTX or cubin and report each kernel's resources."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from argus.codegen.compile import Built, build
from argus.codegen.resources import KernelResources
from argus.dsl.diagnostics import ArgusError
from argus.files import check_output, write_output
from argus.ir import nodes as ir

EXT = {"cuda": ".cu", "ptx": ".ptx", "cubin": ".cubin"}


def resource_line(r: KernelResources, dynamic_smem: int) -> str:
    spill = "spills unknown" if r.spill_store_bytes is None else \
        f"{r.spill_store_bytes} B spill stores, {r.spill_load_bytes} B spill loads"
    return (f"{r.name}: {r.registers} registers, {dynamic_smem} B dynamic + {r.static_smem_bytes} B static shared "
            f"memory, {r.stack_frame_bytes} B stack frame, {spill}")


def resource_json(r: KernelResources, dynamic_smem: int) -> dict:
    return {"kernel": r.name, "registers": r.registers, "dynamic_smem_bytes": dynamic_smem,
            "static_smem_bytes": r.static_smem_bytes, "stack_frame_bytes": r.stack_frame_bytes,
            "spill_store_bytes": r.spill_store_bytes, "spill_load_bytes": r.spill_load_bytes, "arch": r.arch}


def write_artefact(built: Built, emit: str, ptx: str | None, output: str | None, force: bool = False) -> str:
    if emit == "cuda":
        data: bytes = built.generated.source.encode()
    elif emit == "ptx":
        data = (ptx or "").encode()
    else:
        data = built.result.binary
    if output == "-":
        if emit == "cubin":
            sys.stdout.buffer.write(data)
        else:
            sys.stdout.write(data.decode())
        return "<stdout>"
    path = Path(output or f"{built.generated.name}{EXT[emit]}")
    return str(write_output(path, data, force=force))  # no symlinks followed, no silent overwrite


def _write_failed_source(file: str, k: ir.Kernel, out: str | None, force: bool) -> None:
    from argus.codegen.emit import generate

    source = generate(k, file).source
    if out == "-":
        sys.stdout.write(source)
        return
    path = write_output(Path(out or f"{artefact_name(k)}.cu"), source.encode(), force=force)
    print(f"{file}: kernel '{k.name}': the generated CUDA does not compile; wrote it to {path}", file=sys.stderr)


def artefact_name(k: ir.Kernel) -> str:
    """The generated entry symbol, which names the default artefact (argus.codegen.emit: a C keyword
    or an ag_ name gets an argus_ prefix)."""
    from argus.codegen.cexpr import C_KEYWORDS

    return k.name if k.name not in C_KEYWORDS and not k.name.startswith("ag_") else f"argus_{k.name}"


def _output_folder(file: str, output: str, count: int) -> Path:
    """-o for several kernels: a folder, created when absent; never a symbolic link (links are not
    followed, as for a file) nor anything but a folder."""
    from argus.dsl.diagnostics import error

    p = Path(output)
    if p.is_symlink():
        raise error("io", f"refusing to write into {p}: it is a symbolic link", None,
                    "remove the link or choose another -o folder (links are never followed)")
    if p.exists() and not p.is_dir():
        raise error("io", f"{file} holds {count} kernels, so -o names a folder, and {p} is not one", None,
                    "give a folder (created if absent), or pick one kernel with --kernel")
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise error("io", f"cannot create the folder {p}: {exc.strerror or exc}", None) from None
    return p


def build_command(file: str, kernels: list[ir.Kernel], *, emit: str = "cubin", arch: str | None = None,
                  output: str | None = None, fmt: str = "text", force: bool = False) -> int:
    """Build each lowered kernel of `file`. One kernel: `output` is the artefact's path (- for stdout).
    Several: `output` is a folder (created) holding KERNEL.cu / .ptx / .cubin each; - concatenates text
    artefacts on stdout (not cubins). Every artefact path is checked before anything is compiled: no
    symbolic link is followed and no existing file is replaced without `force` (argus.files)."""
    from argus.dsl.diagnostics import error
    from argus.records import file_record, record

    many = len(kernels) > 1
    if many and output == "-" and emit == "cubin":
        raise error("usage", f"{file} holds {len(kernels)} kernels: several cubins cannot go to stdout", None,
                    "pick one with --kernel, or write them to a folder with -o DIR")
    folder = _output_folder(file, output, len(kernels)) if many and output not in (None, "-") else None
    outs: list[str | None] = []
    for k in kernels:
        name = f"{artefact_name(k)}{EXT[emit]}"
        out = str(folder / name) if folder is not None else output
        if out != "-":
            check_output(out or name, force=force)
        outs.append(out)
    records = []
    for k, out in zip(kernels, outs):
        try:
            built = build(k, arch=arch)  # always a cubin: the resource report reads it
        except ArgusError as exc:
            if emit == "cuda" and any(d.code == "nvrtc" for d in exc.diagnostics):
                _write_failed_source(file, k, out, force)  # what the nvrtc hint points at
            raise
        ptx = build(k, arch=arch, want="ptx").result.ptx if emit == "ptx" else None
        where = write_artefact(built, emit, ptx, out, force)
        res = built.resources
        smem = built.generated.smem_bytes
        records.append(record(file=file, kernel=k.name, status="ok", arch=built.arch, emit=emit, output=where,
                              cached=built.result.cached,
                              functions=[resource_json(r, smem) for r in res.values()]))
        if fmt == "text":
            stream = sys.stderr if where == "<stdout>" else sys.stdout
            print(f"{file}: kernel '{k.name}' built for {built.arch}{' (cached)' if built.result.cached else ''}; "
                  f"wrote {emit} to {where}", file=stream)
            for r in res.values():
                print(f"  {resource_line(r, smem)}", file=stream)
            for w in built.result.warnings:
                print(f"  warning: {w}", file=stream)
    if fmt == "json":
        print(json.dumps(file_record(file, "ok", records) if many else records[0], indent=2))
    return 0
