"""Every example kernel: verified by `argus check` (its numeric tier runs the interpreter against the
reference at two shapes), or a known verifier verdict that is not a bug of the kernel (KNOWN, with the
check and why). The code generator builds each one in tests/codegen/test_emit.py."""

from __future__ import annotations

import pytest

from argus.dsl.parser import parse_file
from argus.verification import verify_kernel
from tests.conftest import EXAMPLES

# The kernels of examples/gemm*.arg, flash_attention.arg and moe.arg have their own verifier tests.
FILES = ["softmax.arg", "rmsnorm.arg", "layernorm.arg", "transpose.arg", "rope.arg", "gemm_epilogue.arg",
         "bmm.arg", "gemm_fp8.arg", "decode_attention.arg",
         "moe_route.arg", "flash_attention_ws.arg", "flash_attention_varlen.arg"]

# (file, kernel) -> (check, what the verifier says): correct kernels the verifier does not prove yet
KNOWN: dict = {}

CASES = [(f, k.name) for f in FILES for k in parse_file(str(EXAMPLES / f)).kernels] + \
    [("gemm_ws.arg", "gemm_splitk"), ("gemm_ws.arg", "splitk_reduce")]  # split-K: the layer gemm_ws_splitk


@pytest.mark.parametrize(("file", "kernel"), CASES, ids=[f"{f}:{k}" for f, k in CASES])
def test_example_verifies(file: str, kernel: str) -> None:
    node = next(k for k in parse_file(str(EXAMPLES / file)).kernels if k.name == kernel)
    v = verify_kernel(node)
    not_verified = {r.check for r in v.results if r.status != "verified"}
    if (file, kernel) in KNOWN:
        check, _ = KNOWN[(file, kernel)]
        assert v.status == "unknown" and not_verified == {check}, v.render()
    else:
        assert v.status == "verified", v.render()
