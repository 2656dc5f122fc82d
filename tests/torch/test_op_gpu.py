"""argus.torch.op on CUDA tensors (marker `gpu`): examples/gemm.arg and examples/flash_attention.arg as
torch operators, eager and inside torch.compile(fullgraph=True) with the default (inductor) backend,
against float64 references on fresh random inputs at shapes that are not tile multiples; the launch on
torch's current stream; the caching allocator poisoned with NaN before each call, so an output element
the kernel skips shows."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cuda.bindings.driver")

import argus  # noqa: E402
import argus.torch as at  # noqa: E402
from tests.conftest import EXAMPLES  # noqa: E402
from tests.runtime.test_driver_gpu import gpu  # noqa: E402
from tests.torch.test_op import Block, attention_ref, rel  # noqa: E402


@pytest.fixture(scope="module")
def gemm():
    return at.op(argus.load(EXAMPLES / "gemm.arg"), name="test_gemm_gpu")


@pytest.fixture(scope="module")
def attention():
    return at.op(argus.load(EXAMPLES / "flash_attention.arg", GROUP=2), name="test_attention_gpu")


def cuda_bf16(*shape: int, seed: int) -> torch.Tensor:
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, generator=g, device="cuda").to(torch.bfloat16)


def poison_allocator(*shapes: tuple[int, ...]) -> None:
    """Leave NaN-filled blocks of these sizes (and a large one) in torch's caching allocator, where the
    operator's outputs will be carved from."""
    blocks = [torch.full(s, float("nan"), device="cuda") for s in shapes]
    blocks.append(torch.full((64 << 20,), float("nan"), dtype=torch.bfloat16, device="cuda"))
    torch.cuda.synchronize()
    del blocks


@gpu
@pytest.mark.parametrize("m,n,k", [(200, 136, 72), (333, 517, 129), (1024, 768, 256)])
def test_gemm_op_eager(gemm, m, n, k):
    a, b = cuda_bf16(m, k, seed=m), cuda_bf16(k, n, seed=n)
    poison_allocator((m, n))
    c = gemm(a, b)
    torch.cuda.synchronize()
    assert c.shape == (m, n) and c.dtype == torch.bfloat16 and c.is_cuda
    assert torch.isfinite(c).all()
    assert rel(c, a.double() @ b.double()) < 1e-2


@gpu
@pytest.mark.parametrize("b,hkv,sq,skv", [(1, 2, 333, 517), (2, 1, 200, 129)])
def test_attention_op_eager(attention, b, hkv, sq, skv):
    q = cuda_bf16(b, 2 * hkv, sq, 128, seed=sq)
    k, v = cuda_bf16(b, hkv, skv, 128, seed=skv), cuda_bf16(b, hkv, skv, 128, seed=skv + 1)
    poison_allocator((b, 2 * hkv, sq, 128), (b, 2 * hkv, sq))
    o, lse = attention(q, k, v)
    torch.cuda.synchronize()
    ref_o, ref_lse = attention_ref(q, k, v, group=2)
    assert torch.isfinite(o).all() and torch.isfinite(lse).all()
    assert rel(o, ref_o) < 1e-2 and rel(lse, ref_lse) < 1e-4


@gpu
def test_a_model_compiles_fullgraph_with_inductor(gemm, attention):
    model = Block(gemm, attention, d=128, heads=2).cuda()
    graphs = []

    def spy(gm, example_inputs):  # dynamo's graph, then inductor compiles it
        graphs.append(gm)
        from torch._inductor.compile_fx import compile_fx

        return compile_fx(gm, example_inputs)

    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend=spy)
    for s in (333, 200):  # not tile multiples; the second may recompile with a dynamic dim
        x = cuda_bf16(s, 256, seed=s)
        poison_allocator((s, 768), (s, 256))
        out = compiled(x)
        torch.cuda.synchronize()
        assert torch.isfinite(out).all() and rel(out, model.reference(x)) < 2e-2
    called = [str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert called.count("argus.test_gemm_gpu.default") == 2 and called.count("argus.test_attention_gpu.default") == 1
    torch._dynamo.reset()
    x = cuda_bf16(333, 256, seed=1)
    eager = model(x)
    default = torch.compile(model, fullgraph=True)(x)  # the default backend, as a user would call it
    torch.cuda.synchronize()
    assert rel(default, model.reference(x)) < 2e-2 and rel(eager, model.reference(x)) < 2e-2
    torch._dynamo.reset()


@gpu
def test_the_op_and_the_kernel_run_on_the_current_stream(gemm):
    """On a side stream, a slow sleep then a copy into A, then the kernel: launched on that stream it
    reads the copied A; launched on any other stream it would read the zeros A held before."""
    m, n, k = 333, 200, 128
    a, b = cuda_bf16(m, k, seed=11), cuda_bf16(k, n, seed=12)
    ref = a.double() @ b.double()
    kernel = argus.load(EXAMPLES / "gemm.arg")
    for call in ("op", "kernel"):
        a2 = torch.zeros_like(a)
        c = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        torch.cuda.synchronize()
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            torch.cuda._sleep(100_000_000)  # tens of milliseconds on s
            a2.copy_(a)
            if call == "op":
                c = gemm(a2, b)
            else:
                kernel(a2, b, c)
        s.synchronize()
        assert rel(c, ref) < 1e-2, call


@gpu
def test_argument_errors_on_cuda(gemm):
    a, b = cuda_bf16(64, 32, seed=1), cuda_bf16(32, 48, seed=2)
    with pytest.raises(argus.ArgusError, match=r"argument B: .*on cpu \(argument A is on cuda:0\)"):
        gemm(a, b.cpu())
    with pytest.raises(argus.ArgusError, match=r"argument A: expected bf16\[M, K\] \(torch.bfloat16\), got "
                       r"torch.float16"):
        gemm(a.half(), b)
    kernel = argus.load(EXAMPLES / "gemm.arg")
    c = torch.empty(64, 48, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(argus.ArgusError, match="non-contiguous"):
        kernel(a, b.T.contiguous().T, c)
    assert math.isfinite(rel(gemm(a, b.T.contiguous().T), a.double() @ b.double()))  # the op makes it contiguous
