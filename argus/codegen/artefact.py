"""`argus build`: write the generated CUDA, PTX or cubin and report each kernel's resources."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from argus.codegen.compile import Built, build
from argus.codegen.resources import KernelResources
from argus.files import check_output, write_output

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


def build_command(file: str, defines: dict[str, object], kernel: str | None, *, emit: str = "cubin",
                  arch: str | None = None, output: str | None = None, fmt: str = "text", force: bool = False) -> int:
    from argus.ir.build import build_file

    k = build_file(file, defines, kernel)
    if output != "-":
        check_output(output or f"{k.name}{EXT[emit]}", force=force)
    built = build(k, arch=arch)  # always a cubin: the resource report reads it
    ptx = build(k, arch=arch, want="ptx").result.ptx if emit == "ptx" else None
    where = write_artefact(built, emit, ptx, output, force)
    res = built.resources
    smem = built.generated.smem_bytes
    if fmt == "json":
        print(json.dumps({"file": file, "kernel": k.name, "status": "ok", "arch": built.arch, "emit": emit,
                          "output": where, "cached": built.result.cached,
                          "kernels": [resource_json(r, smem) for r in res.values()]}, indent=2))
    else:
        out = sys.stderr if where == "<stdout>" else sys.stdout
        print(f"{file}: kernel '{k.name}' built for {built.arch}{' (cached)' if built.result.cached else ''}; "
              f"wrote {emit} to {where}", file=out)
        for r in res.values():
            print(f"  {resource_line(r, smem)}", file=out)
        for w in built.result.warnings:
            print(f"  warning: {w}", file=out)
    return 0
