"""Front door of the compiler: source -> checked AST -> IR -> pass pipeline."""

from __future__ import annotations

from pathlib import Path

from argus.dsl import ast
from argus.dsl.check import check_kernel
from argus.dsl.diagnostics import error
from argus.dsl.parser import parse, parse_file
from argus.ir import nodes as ir
from argus.ir.lower import lower
from argus.ir.passes import PIPELINE


def build_kernel(kernel: ast.Kernel, defines: dict[str, object] | None = None) -> ir.Kernel:
    k = lower(check_kernel(kernel, defines or {}))
    for p in PIPELINE:
        k = p(k)
    return k


def select_kernel(module: ast.Module, name: str | None) -> ast.Kernel:
    if not module.kernels:
        raise error("empty", "no kernel in this file", module.span,
                    "declare one: kernel name(A: bf16[M, K], ...):")
    if name is None:
        return module.kernels[0]
    for k in module.kernels:
        if k.name == name:
            return k
    names = ", ".join(k.name for k in module.kernels)
    if any(g.name == name for g in module.layers):
        raise error("unknown-kernel", f"'{name}' is a layer: a composition of the file's kernels, with no kernel "
                    "body to build or launch (a layer that calls kernels runs from Python: argus.load(path, name))",
                    module.layer(name).name_span, "kernels in this file: " + names)
    raise error("unknown-kernel", f"no kernel named '{name}'", module.span, "kernels in this file: " + names)


def build_file(path: str | Path, defines: dict[str, object] | None = None, kernel: str | None = None) -> ir.Kernel:
    return build_kernel(select_kernel(parse_file(path), kernel), defines)


def build_source(text: str, defines: dict[str, object] | None = None, kernel: str | None = None,
                 path: str = "<string>") -> ir.Kernel:
    return build_kernel(select_kernel(parse(text, path), kernel), defines)
