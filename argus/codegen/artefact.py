"""`argus build`: write the generated CUDA, PTX or cubin and report each kernel's resources."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from argus.codegen.compile import Built, build
from argus.codegen.resources import KernelResources
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


def write_artefact(built: Built, emit: str, ptx: str | None, output: str | None) -> str:
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
    path.write_bytes(data)
    return str(path)


def build_command(file: str, kernels: list[ir.Kernel], *, emit: str = "cubin", arch: str | None = None,
                  output: str | None = None, fmt: str = "text") -> int:
    """Build each lowered kernel of `file`. One kernel: `output` is the artefact's path (- for stdout).
    Several: `output` is a folder (created) holding KERNEL.cu / .ptx / .cubin each; - concatenates text
    artefacts on stdout (not cubins)."""
    from argus.dsl.diagnostics import error
    from argus.records import file_record, record

    many = len(kernels) > 1
    if many and output == "-" and emit == "cubin":
        raise error("usage", f"{file} holds {len(kernels)} kernels: several cubins cannot go to stdout", None,
                    "pick one with --kernel, or write them to a folder with -o DIR")
    if many and output not in (None, "-"):
        Path(output).mkdir(parents=True, exist_ok=True)
    records = []
    for k in kernels:
        built = build(k, arch=arch)  # always a cubin: the resource report reads it
        ptx = build(k, arch=arch, want="ptx").result.ptx if emit == "ptx" else None
        out = str(Path(output, f"{built.generated.name}{EXT[emit]}")) if many and output not in (None, "-") \
            else output
        where = write_artefact(built, emit, ptx, out)
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
