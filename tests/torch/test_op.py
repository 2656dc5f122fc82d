"""argus.torch.op on the CPU: registration, the schema, fake-tensor shape propagation, torch.compile
without graph breaks, argument checks, and real results (CPU tensors run in the interpreter) against
float64 references. The same operators on CUDA tensors: test_op_gpu.py."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

import argus  # noqa: E402
import argus.torch as at  # noqa: E402
from argus.dsl.diagnostics import ArgusError  # noqa: E402
from argus.runtime.arrays import ArgumentError  # noqa: E402
from tests.conftest import EXAMPLES  # noqa: E402

GEMM = argus.load(EXAMPLES / "gemm.arg", BM=64, BN=64, BK=32, STAGES=2, SWIZZLE=64)
FA = argus.load(EXAMPLES / "flash_attention.arg", HD=64, GROUP=2, BQ=64, BKV=64)


@pytest.fixture(scope="module")
def gemm():
    return at.op(GEMM, name="test_gemm_cpu")


@pytest.fixture(scope="module")
def attention():
    return at.op(FA, name="test_attention_cpu")


def bf16(*shape: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(torch.bfloat16)


def rel(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.double() - want).norm() / want.norm())


def attention_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(Q K^T / sqrt(D)) V and the log-sum-exp per query row, in float64."""
    q, k, v = q.double(), k.double().repeat_interleave(group, 1), v.double().repeat_interleave(group, 1)
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    return torch.softmax(s, -1) @ v, torch.logsumexp(s, -1)


def test_registration_and_schema(gemm, attention):
    assert gemm.qualname == "argus::test_gemm_cpu" and gemm.schema == "(Tensor A, Tensor B) -> Tensor"
    assert attention.schema == "(Tensor Q, Tensor K, Tensor V) -> (Tensor, Tensor)"
    assert hasattr(torch.ops.argus, "test_gemm_cpu")
    assert at.op(GEMM, name="test_gemm_cpu") is gemm  # the same program again: the same operator
    with pytest.raises(ArgusError, match="already registered for another kernel"):
        at.op(GEMM.with_params(BK=64), name="test_gemm_cpu")
    from tests.dsl import inline_kernels as m

    scale = at.op(m.scale_rows, name="test_scale_cpu")
    assert scale.schema == "(Tensor X, float alpha=2.0) -> Tensor"
    x = torch.randn(40, 70)
    torch.testing.assert_close(scale(x), x * 2.0)
    torch.testing.assert_close(scale(x, alpha=-1.5), x * -1.5)
    torch.testing.assert_close(torch.ops.argus.test_scale_cpu(x, 3.0), x * 3.0)


def test_output_dims_must_come_from_inputs(tmp_path):
    f = tmp_path / "fill.arg"
    f.write_text("kernel fill(X: f32[N], Y: f32[M]):\n    launch grid=(cdiv(M, 128),), threads=128\n"
                 "    i = block_id(0)\n    store(Y[i * 128 : +128], full(f32[128], 1.0))\n")
    with pytest.raises(ArgusError, match="output Y's dimension M is not the size of any input") as info:
        at.op(argus.load(f), name="test_fill_cpu")
    assert "dims={'M': ...}" in str(info.value)
    fill = at.op(argus.load(f), name="test_fill_cpu", dims={"M": 300})
    torch.testing.assert_close(fill(torch.zeros(5)), torch.ones(300))


def test_eager_gemm_in_the_interpreter(gemm):
    a, b = bf16(70, 40, seed=1), bf16(40, 90, seed=2)  # no dim a tile multiple
    c = gemm(a, b)
    assert c.dtype == torch.bfloat16 and c.shape == (70, 90) and c.device.type == "cpu"
    assert rel(c, a.double() @ b.double()) < 1e-2


def test_eager_attention_in_the_interpreter(attention):
    q, k, v = bf16(1, 2, 100, 64, seed=3), bf16(1, 1, 150, 64, seed=4), bf16(1, 1, 150, 64, seed=5)
    o, lse = attention(q, k, v)
    ref_o, ref_lse = attention_ref(q, k, v, group=2)
    assert o.shape == (1, 2, 100, 64) and o.dtype == torch.bfloat16 and lse.dtype == torch.float32
    assert rel(o, ref_o) < 1e-2 and rel(lse, ref_lse) < 1e-4


def test_fake_tensors_propagate_shapes(gemm, attention):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        a = mode.from_tensor(torch.empty(300, 72, dtype=torch.bfloat16))
        b = mode.from_tensor(torch.empty(72, 500, dtype=torch.bfloat16))
        c = gemm(a, b)
        assert type(c).__name__ == "FakeTensor" and c.shape == (300, 500) and c.dtype == torch.bfloat16
        q = mode.from_tensor(torch.empty(2, 8, 333, 64, dtype=torch.bfloat16))
        kv = mode.from_tensor(torch.empty(2, 4, 517, 64, dtype=torch.bfloat16))
        o, lse = attention(q, kv, kv)
        assert o.shape == (2, 8, 333, 64) and lse.shape == (2, 8, 333) and lse.dtype == torch.float32
    meta = gemm(torch.empty(7, 9, dtype=torch.bfloat16, device="meta"),
                torch.empty(9, 11, dtype=torch.bfloat16, device="meta"))
    assert meta.device.type == "meta" and meta.shape == (7, 11)


def test_opcheck(gemm):
    # schema, fake vs real, and AOT dispatch (static and dynamic shapes) through torch's own checker
    torch.library.opcheck(gemm._def, (bf16(40, 24, seed=6), bf16(24, 72, seed=7)))


def test_arguments_are_checked_eagerly_and_when_traced(gemm):
    a, b = bf16(70, 40, seed=1), bf16(40, 90, seed=2)
    with pytest.raises(ArgumentError) as info:
        gemm(a.float(), b)
    assert info.value.message == "argument A: expected bf16[M, K] (torch.bfloat16), got torch.float32[70, 40] on cpu"
    assert "gemm.arg:7:13" in str(info.value)
    with pytest.raises(ArgumentError, match=r"argument B: .*got torch.bfloat16\[41, 90\] on cpu \(K is 40 from "
                       r"argument A\)"):
        gemm(a, bf16(41, 90, seed=2))
    with pytest.raises(ArgumentError, match=r"\(3 dims instead of 2\)"):
        gemm(a, b[None])
    with pytest.raises(ArgumentError, match=r"argument B: .*on meta \(argument A is on cpu\)"):
        gemm(a, b.to("meta"))
    f = torch.compile(lambda x, y: gemm(x, y), fullgraph=True, backend="aot_eager")
    with pytest.raises(Exception, match=r"argument B: expected bf16\[K, N\]"):
        f(a, bf16(41, 90, seed=2))
    torch._dynamo.reset()


class Block(torch.nn.Module):
    """A small model around the two operators: projection (Argus GEMM), attention (Argus), output
    projection (Argus GEMM), with torch ops between them."""

    def __init__(self, gemm, attention, d: int = 64, heads: int = 2, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.w_qkv = torch.nn.Parameter((torch.randn(d * heads, 3 * d * heads, generator=g) / math.sqrt(d * heads))
                                        .to(torch.bfloat16), requires_grad=False)
        self.w_out = torch.nn.Parameter((torch.randn(d * heads, d * heads, generator=g) / math.sqrt(d * heads))
                                        .to(torch.bfloat16), requires_grad=False)
        self.gemm, self.attention, self.d, self.heads = gemm, attention, d, heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x.shape[0]
        qkv = self.gemm(x, self.w_qkv).view(s, 3, self.heads, self.d).permute(1, 2, 0, 3)
        q, k, v = qkv[0][None], qkv[1][None], qkv[2][None]  # [1, H, S, D]; made contiguous by the op
        o, _ = self.attention(q, k[:, :1], v[:, :1])  # GQA: one kv head for two query heads
        return torch.relu(self.gemm(o[0].permute(1, 0, 2).reshape(s, -1), self.w_out)) + x

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        """The same model in float64, rounding where the kernels store bf16."""
        s = x.shape[0]
        r = lambda t: t.to(torch.bfloat16).double()  # noqa: E731
        qkv = r(x.double() @ self.w_qkv.double()).view(s, 3, self.heads, self.d).permute(1, 2, 0, 3)
        o, _ = attention_ref(qkv[0][None], qkv[1][None, :1], qkv[2][None, :1], group=self.heads)
        return torch.relu(r(r(o)[0].permute(1, 0, 2).reshape(s, -1) @ self.w_out.double())) + x.double()


def test_compile_fullgraph_without_graph_breaks(gemm, attention):
    model = Block(gemm, attention)
    x = bf16(72, 128, seed=8)
    graphs = []

    def record(gm: torch.fx.GraphModule, example_inputs):  # a backend that keeps the graph, then runs it
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    out = torch.compile(model, fullgraph=True, backend=record)(x)
    (gm,) = graphs
    called = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    assert called.count("argus.test_gemm_cpu.default") == 2, called
    assert called.count("argus.test_attention_cpu.default") == 1, called
    assert torch._dynamo.explain(model)(x).graph_break_count == 0
    # through AOTAutograd (the fake implementations trace the graph) with dynamic shapes, then run it
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager", dynamic=True)
    assert rel(out, model.reference(x)) < 2e-2
    for s in (72, 100):
        x = bf16(s, 128, seed=s)
        assert rel(compiled(x), model.reference(x)) < 2e-2
    torch._dynamo.reset()


def test_the_extra_stays_optional():
    import subprocess
    import sys

    code = ("import sys; sys.modules['torch'] = None; import argus, numpy as np; "
            "k = argus.load('examples/gemm.arg', BM=64, BN=64); a = np.zeros((8, 8), np.float32); k(a, a, a); "
            "print(argus.load('examples/gemm.arg').verify(M=64, N=64, K=64).status)")
    from tests.conftest import ROOT

    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert p.returncode == 0 and p.stdout.strip() == "verified", p.stderr
