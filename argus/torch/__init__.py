"""Argus kernels as PyTorch operators (needs torch: `pip install argus[torch]`).

    gemm = argus.torch.op(argus.load("examples/gemm.arg"))   # registers torch.ops.argus.gemm
    C = gemm(A, B)                                            # eager, or inside torch.compile(fullgraph=True)

See argus.torch.op for what the operator takes, returns and checks.
"""

from __future__ import annotations

from argus.torch.op import TorchOp, op, signature_of

__all__ = ["TorchOp", "op", "signature_of"]
