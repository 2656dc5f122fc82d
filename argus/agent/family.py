"""Which family a kernel belongs to, read from its structure (never from its name), and which kernel of
a file to tune by default.

The family picks the knowledge-base entries that apply (`applies_to` in knowledge/hopper.json) and
the library a report compares with. It follows from the `reference:` block and the inputs:

* attention: the reference normalises with `softmax` and multiplies matrices;
* moe: the kernel reads integer inputs that its assumes constrain (routing metadata) — a grouped GEMM
  over routed rows, or the weighted scatter that combines them;
* gemm: any other reference with a matrix product (`@`, `matmul`, `einsum` of two operands);
* other: no matrix product (elementwise, reductions); tuned with the GEMM family's generic actions.
"""

from __future__ import annotations

from argus.dsl import ast
from argus.ir import nodes as ir

FAMILIES = ("gemm", "attention", "moe", "other")


def _calls(stmts) -> tuple[set[str], bool]:
    names: set[str] = set()
    product = False
    for node in ast.walk(stmts):
        if isinstance(node, ast.Call):
            names.add(node.func_name or "")
            if node.func_name == "matmul" or (node.func_name == "einsum" and len(node.args) >= 3):
                product = True
        elif isinstance(node, ast.BinOp) and node.op == "@":
            product = True
    return names, product


def family(kernel: ir.Kernel) -> str:
    from argus.agent.problem import data_ints

    names, product = _calls(tuple(kernel.reference or ()))
    if "softmax" in names and product:
        return "attention"
    if data_ints(kernel):
        return "moe"
    return "gemm" if product else "other"


def kb_kind(fam: str) -> str:
    """The knowledge base's kernel kinds are gemm / attention / moe."""
    return fam if fam in ("gemm", "attention", "moe") else "gemm"


def default_kernel(kernels: list[ir.Kernel]) -> tuple[ir.Kernel, str]:
    """The kernel of a file to tune when none is named: the one with the most matrix-product work at a
    common probe size (moe.arg: the up-projection), the first on ties; and a sentence saying so."""
    from argus.agent.workload import useful_flops

    def work(k: ir.Kernel) -> float:
        try:
            return useful_flops(k, {d: 256 for d in k.dims})
        except Exception:  # noqa: BLE001 - a reference the walker cannot size counts as no work
            return 0.0

    best = max(kernels, key=lambda k: (work(k), -kernels.index(k)))
    if len(kernels) == 1:
        return best, ""
    others = ", ".join(k.name for k in kernels if k is not best)
    why = "the most matrix-product work" if work(best) > 0 else "the first"
    return best, (f"tuning kernel '{best.name}' ({why} of the {len(kernels)} kernels in the file; "
                  f"the others: {others}; choose one with --kernel NAME)")
