"""The issue-15 examples and constructs on the GPU: generated CUDA against float64 references.

Each case draws fresh random inputs (normal values, never zeros; argus.interp.run.make_arrays), poisons
every output with NaN (an atomic_add target, which the kernel adds to, starts random), launches once and
compares with the `reference:` block evaluated in float64 with the interpreter's criterion. Shapes are
not tile multiples. Layers (softmax_long and gemm_ws_splitk through argus.load, decode_attention by hand) chain their
kernels on the GPU and are compared with the layer's own reference. Every construct of tests/codegen/test_constructs.py
runs too, in each register layout (the wgmma ones only run here). Marked `gpu`: skipped without a GPU.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("cuda.bindings.driver")

from argus.dsl.parser import parse, parse_file  # noqa: E402
from argus.dsl.types import DTYPES  # noqa: E402
from argus.ir.build import build_kernel  # noqa: E402
from tests.codegen.test_constructs import CASES as CONSTRUCT_CASES  # noqa: E402
from tests.codegen.test_constructs import kernel_source  # noqa: E402
from tests.conftest import EXAMPLES  # noqa: E402
from tests.runtime.test_driver_gpu import ARCH, gpu  # noqa: E402


def _kernel(file: str, name: str, params: dict):
    node = next(k for k in parse_file(str(EXAMPLES / file)).kernels if k.name == name)
    return build_kernel(node, params)


def _all_kernels() -> list:
    """Every kernel the tests below launch: (example file, kernel name, params), or (source text, the path
    its test parses it under, {}) -- the path is in the #line directives, so in the cache key."""
    out = [(f, n, p) for f, n, p, _ in CASES] + [("decode_attention.arg", "decode_split", p) for p, _ in DECODE]
    out += [("softmax.arg", "softmax_stats", {}), ("softmax.arg", "softmax_normalize", {}),
            ("decode_attention.arg", "decode_combine", {}), ("gemm_ws.arg", "gemm_splitk", {}),
            ("gemm_ws.arg", "splitk_reduce", {})]
    out += [("decode_attention.arg", "decode_split", {"GROUP": g, "CHUNK": c}) for g, c in ((8, 512), (4, 128))]
    out += [("decode_attention.arg", "decode_split_ws", p) for p, _ in DECODE_WS]
    out += [("decode_attention.arg", "decode_spec_ws", p) for p, _ in DECODE_SPEC]
    out += [(kernel_source(lay, c), f"{lay}_{c}.arg", {}) for lay, c in CONSTRUCT_CASES]
    return out


@pytest.fixture(scope="module", autouse=True)
def _warm_cache() -> None:
    """Compile every kernel in parallel processes first (the disk cache then serves the tests)."""
    if ARCH is None:
        return
    import concurrent.futures as cf
    import multiprocessing as mp

    with cf.ProcessPoolExecutor(max_workers=8, mp_context=mp.get_context("spawn")) as pool:
        list(pool.map(_warm_one, _all_kernels()))


def _warm_one(item) -> None:
    src, name, params = item
    if src.endswith(".arg"):
        k = _kernel(src, name, params)
    else:
        k = build_kernel(parse(src, name).kernels[0], params)
    _gpu_build(k)


def _gpu_build(k):
    from argus.codegen.compile import build

    return build(k, arch=ARCH)


def _gpu_kernel(k):
    from argus.runtime.launch import GpuKernel

    return GpuKernel(_gpu_build(k), 0)


def _check(k, dims: dict, seed: int, criteria: dict | None = None) -> None:
    """One launch on fresh inputs, every output against the float64 reference. `criteria`: output ->
    dtype whose tolerance applies (an fp32 output computed through a bf16 P is held to bf16's)."""
    import torch

    from argus.dsl.reference import evaluate_reference
    from argus.interp.run import compare, make_arrays, reference_env, resolve_scalars
    from argus.runtime.bench import to_device, to_host

    gk = _gpu_kernel(k)
    scalars = resolve_scalars(k, dims)
    host = make_arrays(k, {d: dims[d] for d in k.dims}, np.random.default_rng(seed))
    dev = {t.name: to_device(host[t.name], t.dtype.name) for t in k.tensors}
    gk(**dev, **scalars)
    torch.cuda.synchronize()
    ref = evaluate_reference(k.reference, reference_env(k, host, {d: dims[d] for d in k.dims}, scalars))
    for o in k.outputs:
        c = compare(o, to_host(dev[o]), ref[o], (criteria or {}).get(o, k.tensor(o).dtype))
        assert c.ok, f"{k.name} {dims} seed {seed}: {c.describe()}"


# (file, kernel, params, dims)
CASES = [
    ("softmax.arg", "softmax", {}, {"M": 37, "N": 1000}),
    ("softmax.arg", "softmax", {}, {"M": 300, "N": 2048}),
    ("softmax.arg", "softmax", {"BN": 4096, "THREADS": 512}, {"M": 5, "N": 4000}),
    ("softmax.arg", "softmax", {"BN": 8192, "THREADS": 1024}, {"M": 3, "N": 8192}),
    ("softmax.arg", "softmax", {"BM": 4, "BN": 512, "THREADS": 128}, {"M": 33, "N": 333}),
    # a warp per row (the blocked layout of a tile reduced along its rows), with and without OCC
    ("softmax.arg", "softmax", {"BM": 4, "BN": 1024, "THREADS": 128, "OCC": 16}, {"M": 37, "N": 1000}),
    ("rmsnorm.arg", "rmsnorm", {"BM": 8, "BN": 1024, "THREADS": 256}, {"M": 37, "N": 777}),
    ("layernorm.arg", "layernorm", {"BM": 4, "BN": 2048, "THREADS": 128, "OCC": 16}, {"M": 33, "N": 2000}),
    ("softmax.arg", "softmax_looped", {}, {"M": 7, "N": 5000}),
    ("softmax.arg", "softmax_looped", {"BC": 4096, "THREADS": 512, "OCC": 4}, {"M": 3, "N": 33000}),
    ("softmax.arg", "softmax_looped", {"BC": 1024, "THREADS": 128, "OCC": 16}, {"M": 40, "N": 700}),
    ("softmax.arg", "softmax_stats", {}, {"M": 7, "N": 5000}),
    ("softmax.arg", "softmax_normalize", {}, {"M": 7, "N": 5000}),
    ("rmsnorm.arg", "rmsnorm", {}, {"M": 37, "N": 1000}),
    ("rmsnorm.arg", "rmsnorm", {"BN": 8192, "THREADS": 1024}, {"M": 3, "N": 8000}),
    ("rmsnorm.arg", "rmsnorm", {"BM": 4, "BN": 256, "THREADS": 64}, {"M": 10, "N": 200}),
    ("layernorm.arg", "layernorm", {}, {"M": 37, "N": 1000}),
    ("layernorm.arg", "layernorm", {"BN": 8192, "THREADS": 1024}, {"M": 3, "N": 8000}),
    # the two-pass RMSNorm over column steps: rows shorter than BN, not multiples of BC
    ("rmsnorm.arg", "rmsnorm_looped", {}, {"M": 37, "N": 8000}),
    ("rmsnorm.arg", "rmsnorm_looped", {"BN": 4096, "BC": 1024, "THREADS": 128}, {"M": 5, "N": 3001}),
    ("rmsnorm.arg", "rmsnorm_looped", {"BN": 4096, "BC": 1024, "THREADS": 128, "OCC": 16}, {"M": 300, "N": 4000}),
    # LayerNorm: one shifted statistics pass over column steps, then the output pass
    ("layernorm.arg", "layernorm_looped", {}, {"M": 37, "N": 8000}),
    ("layernorm.arg", "layernorm_looped", {"BN": 4096, "BC": 1024, "THREADS": 128, "OCC": 12}, {"M": 5, "N": 3001}),
    # the TMA-ring kernels: rows past M and columns past N (zero-filled boxes), odd row pitches (the runtime
    # re-pitches X), several laps of the ring per block (M / BR row blocks over 132 blocks)
    ("rmsnorm.arg", "rmsnorm_tma", {}, {"M": 37, "N": 1000}),
    ("rmsnorm.arg", "rmsnorm_tma", {"BR": 1, "BN": 8192, "CONSUMERS": 2, "STAGES": 12}, {"M": 3001, "N": 8000}),
    ("layernorm.arg", "layernorm_tma", {}, {"M": 5003, "N": 1000}),
    ("layernorm.arg", "layernorm_tma", {"BR": 2, "BN": 4096, "CONSUMERS": 2, "STAGES": 12}, {"M": 700, "N": 4000}),
    ("softmax.arg", "softmax_tma", {}, {"M": 5003, "N": 777}),
    ("softmax.arg", "softmax_tma", {"BR": 2, "BN": 2048, "CONSUMERS": 2, "STAGES": 24}, {"M": 1001, "N": 2000}),
    ("transpose.arg", "transpose", {}, {"M": 1000, "N": 333}),
    ("transpose.arg", "transpose_tma", {}, {"M": 1000, "N": 336}),
    ("transpose.arg", "transpose_tma", {"BM": 128, "STAGES": 8, "CONSUMERS": 2}, {"M": 4099, "N": 4000}),
    ("transpose.arg", "transpose", {}, {"M": 4099, "N": 17}),
    ("rope.arg", "rope", {}, {"B": 2, "S": 45, "H": 3, "D": 128, "D2": 64}),
    ("rope.arg", "rope", {"HD": 64}, {"B": 1, "S": 200, "H": 5, "D": 64, "D2": 32}),
    ("transpose.arg", "transpose", {"BM": 128, "BN": 64}, {"M": 1000, "N": 333}),
    ("gemm_epilogue.arg", "gemm_bias_act", {}, {"M": 200, "N": 136, "K": 72}),
    ("gemm_epilogue.arg", "gemm_bias_act", {"ACT": "silu"}, {"M": 129, "N": 264, "K": 520}),
    ("gemm_epilogue.arg", "gemm_bias_act", {"BM": 64, "BN": 64, "CONSUMERS": 1}, {"M": 300, "N": 200, "K": 96}),
    ("gemm_epilogue.arg", "linear_bias_act", {"ACT": "gelu"}, {"M": 200, "N": 136, "K": 72}),
    ("gemm_epilogue.arg", "linear_bias_act", {"ACT": "none"}, {"M": 300, "N": 520, "K": 264}),
    ("gemm_epilogue.arg", "linear_bias_residual", {}, {"M": 129, "N": 264, "K": 520}),
    ("gemm_epilogue.arg", "linear_bias_residual", {"ACT": "silu", "BM": 64, "BN": 64, "BK": 128, "CONSUMERS": 1,
                                                   "STAGES": 6}, {"M": 70, "N": 136, "K": 1000}),
    ("gemm_epilogue.arg", "linear_bias_f32", {}, {"M": 300, "N": 200, "K": 96}),
    ("bmm.arg", "bmm", {}, {"BATCH": 3, "M": 200, "N": 136, "K": 72}),
    ("bmm.arg", "bmm", {"BN": 128}, {"BATCH": 2, "M": 129, "N": 264, "K": 520}),
    ("gemm_ws.arg", "linear", {}, {"M": 200, "N": 136, "K": 72}),
    ("gemm_ws.arg", "linear", {}, {"M": 129, "N": 296, "K": 520}),
    # few rows with the operands' roles swapped (the routes of gemm_ws / linear for M <= 64)
    ("gemm_ws.arg", "gemm_ws_decode", {"BT": 8, "BK": 256, "STAGES": 6}, {"M": 5, "N": 300, "K": 1000}),
    ("gemm_ws.arg", "gemm_ws_decode", {"BT": 64, "BK": 256, "STAGES": 3}, {"M": 70, "N": 136, "K": 520}),
    ("gemm_ws.arg", "linear_decode", {"BT": 16, "BK": 256, "STAGES": 5}, {"M": 13, "N": 296, "K": 1000}),
    ("gemm_ws.arg", "linear_decode", {"BT": 32, "BK": 256, "STAGES": 4}, {"M": 1, "N": 200, "K": 72}),
    ("gemm_fp8.arg", "gemm_fp8", {}, {"M": 200, "N": 136, "K": 144}),
    ("gemm_fp8.arg", "gemm_fp8", {"BM": 64, "BN": 128, "CONSUMERS": 1}, {"M": 129, "N": 264, "K": 528}),
    # gemm_fp8's routes: 64x64 tiles, few rows with the operands' roles swapped, the split-K pieces
    ("gemm_fp8.arg", "gemm_fp8", {"BM": 64, "BN": 64, "BK": 256, "CONSUMERS": 1, "STAGES": 6},
     {"M": 100, "N": 136, "K": 528}),
    ("gemm_fp8.arg", "gemm_fp8_decode", {"BT": 8, "BK": 256, "STAGES": 12}, {"M": 3, "N": 136, "K": 528}),
    ("gemm_fp8.arg", "gemm_fp8_decode", {"BT": 16, "BK": 256, "STAGES": 10}, {"M": 13, "N": 200, "K": 1008}),
    ("gemm_fp8.arg", "gemm_fp8_decode", {"BT": 64, "BK": 256, "STAGES": 6}, {"M": 70, "N": 72, "K": 272}),
    ("gemm_fp8.arg", "gemm_fp8_partial", {"KCHUNK": 512}, {"SPLITS": 4, "M": 200, "N": 136, "K": 1552}),
    ("gemm_fp8.arg", "splitk_reduce_scaled", {}, {"SPLITS": 3, "M": 40, "N": 300}),
    ("decode_attention.arg", "decode_combine", {}, {"B": 2, "H": 3, "NS": 5, "D": 128}),
    ("gemm_ws.arg", "gemm_splitk", {"KCHUNK": 256}, {"SPLITS": 4, "M": 200, "N": 136, "K": 1000}),
    ("gemm_ws.arg", "splitk_reduce", {}, {"SPLITS": 3, "M": 40, "N": 300}),
    ("moe_route.arg", "moe_route", {}, {"T": 333, "E": 8, "KTOP": 2}),
    ("moe_route.arg", "moe_route", {"K": 8}, {"T": 100, "E": 256, "KTOP": 8}),
]


@gpu
@pytest.mark.parametrize(("file", "name", "params", "dims"), CASES,
                         ids=[f"{c[1]}-{'-'.join(f'{k}{v}' for k, v in c[3].items())}" for c in CASES])
def test_example_on_gpu(file: str, name: str, params: dict, dims: dict) -> None:
    k = _kernel(file, name, params)
    for seed in (1, 2):
        _check(k, dims, seed, CRITERIA.get(name))


# The 8-bit wgmma adds products into its fp32 accumulator with fewer bits than fp32 (the H200 2026-12-04:
# gemm_fp8_partial's fp32 partial sums miss fp32's tolerance), so its fp32 workspace is held to bf16's, as
# gemm_fp8's bf16 output is; the interpreter, which adds in fp32, meets fp32's.
CRITERIA = {"gemm_fp8_partial": {"WS": DTYPES["bf16"]}}


DECODE = [({}, {"B": 2, "H": 16, "HKV": 2, "SKV": 700, "D": 128, "NS": 2}),
          ({"GROUP": 4, "CHUNK": 128}, {"B": 1, "H": 8, "HKV": 2, "SKV": 1000, "D": 128, "NS": 8}),
          ({"HD": 64}, {"B": 3, "H": 8, "HKV": 1, "SKV": 4097, "D": 64, "NS": 9}),
          ({"MMA": "mma.sync", "GROUP": 4}, {"B": 2, "H": 8, "HKV": 2, "SKV": 700, "D": 128, "NS": 2})]


# the TMA ring: a split whose last block is partial (SKV 700, 1000), one shorter than the ring (CHUNK 128 at
# BKV 64 with 4 stages), several ring laps (CHUNK 1024 at 6 stages), BKV 128
DECODE_WS = [({}, {"B": 2, "H": 16, "HKV": 2, "SKV": 700, "D": 128, "NS": 2}),
             ({"GROUP": 4, "CHUNK": 128}, {"B": 1, "H": 8, "HKV": 2, "SKV": 1000, "D": 128, "NS": 8}),
             ({"CHUNK": 1024, "STAGES": 6}, {"B": 1, "H": 8, "HKV": 1, "SKV": 3000, "D": 128, "NS": 3}),
             ({"BKV": 128, "STAGES": 3, "CHUNK": 1024}, {"B": 2, "H": 16, "HKV": 2, "SKV": 2500, "D": 128, "NS": 3}),
             # two blocks per multiprocessor: the roles' setmaxnreg inside half the register file (24 + 232)
             ({"OCCUPANCY": 2, "STAGES": 2}, {"B": 3, "H": 16, "HKV": 2, "SKV": 1900, "D": 128, "NS": 4})]
# speculative decode (NQ query rows per sequence, causal among them): 16 rows x GROUP 8 = two consumer
# warpgroups; a last split shorter than NQ (empty partials for the first queries: OP = 0, LP = -inf); one row
DECODE_SPEC = [({}, {"B": 2, "HQS": 256, "HKV": 2, "SKV": 1500, "D": 128, "NS": 3}),
               ({"NQ": 4, "GROUP": 4, "CHUNK": 128}, {"B": 3, "HQS": 32, "HKV": 2, "SKV": 258, "D": 128, "NS": 3}),
               ({"NQ": 1}, {"B": 2, "HQS": 16, "HKV": 2, "SKV": 777, "D": 128, "NS": 2})]


@gpu
@pytest.mark.parametrize(("name", "params", "dims"), [("decode_split", p, d) for p, d in DECODE]
                         + [("decode_split_ws", p, d) for p, d in DECODE_WS]
                         + [("decode_spec_ws", p, d) for p, d in DECODE_SPEC],
                         ids=[f"split{i}" for i in range(len(DECODE))] + [f"ws{i}" for i in range(len(DECODE_WS))]
                         + [f"spec{i}" for i in range(len(DECODE_SPEC))])
def test_decode_split_on_gpu(name: str, params: dict, dims: dict) -> None:
    k = _kernel("decode_attention.arg", name, params)
    for seed in (1, 2):
        _check(k, dims, seed, {"OP": DTYPES["bf16"]})  # P is bf16 on its way to OP


def _layer_run(kernels: list, tensors: dict, dims: dict) -> None:
    """Launch (kernel, dims-of-its-args) in order over named device tensors."""
    import torch

    for k in kernels:
        gk = _gpu_kernel(k)
        gk(**{t.name: tensors[t.name] for t in k.tensors})
    torch.cuda.synchronize()


@gpu
@pytest.mark.parametrize("n", [5000, 1024, 33000])
def test_softmax_long_layer_on_gpu(n: int) -> None:
    import torch

    import argus
    from argus.interp.run import compare

    m = 7
    x = torch.randn(m, n, device="cuda").to(torch.bfloat16)
    t = {"Y": torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)}
    argus.load(EXAMPLES / "softmax.arg", "softmax_long")(x, t["Y"])  # the layer: stats, then normalize
    torch.cuda.synchronize()
    ref = torch.softmax(x.double(), dim=1).cpu().numpy()
    c = compare("Y", t["Y"].float().cpu().numpy(), ref, DTYPES["bf16"])
    assert c.ok, c.describe()


@gpu
@pytest.mark.parametrize(("b", "hkv", "group", "skv", "chunk"), [(2, 2, 8, 3000, 512), (1, 4, 4, 777, 128)])
def test_decode_attention_layer_on_gpu(b: int, hkv: int, group: int, skv: int, chunk: int) -> None:
    import torch

    from argus.interp.run import compare

    d = 128
    ns = -(-skv // chunk)
    h = hkv * group
    q = torch.randn(b, h, d, device="cuda").to(torch.bfloat16)
    kk = torch.randn(b, hkv, skv, d, device="cuda").to(torch.bfloat16)
    v = torch.randn(b, hkv, skv, d, device="cuda").to(torch.bfloat16)
    t = {"Q": q, "K": kk, "V": v, "OP": torch.full((b, h, ns, d), float("nan"), device="cuda"),
         "LP": torch.full((b, h, ns), float("nan"), device="cuda"),
         "O": torch.full((b, h, d), float("nan"), device="cuda", dtype=torch.bfloat16)}
    split = _kernel("decode_attention.arg", "decode_split", {"GROUP": group, "CHUNK": chunk})
    _layer_run([split, _kernel("decode_attention.arg", "decode_combine", {})], t, {})
    kr = kk.double().repeat_interleave(group, dim=1)
    vr = v.double().repeat_interleave(group, dim=1)
    p = torch.softmax(torch.einsum("bhd,bhkd->bhk", q.double(), kr) / d ** 0.5, dim=-1)
    ref = torch.einsum("bhk,bhkd->bhd", p, vr).cpu().numpy()
    c = compare("O", t["O"].float().cpu().numpy(), ref, DTYPES["bf16"])
    assert c.ok, c.describe()


@gpu
@pytest.mark.parametrize(("b", "hkv", "group", "nq", "skv", "chunk"),
                         [(2, 2, 8, 16, 3000, 512), (1, 4, 4, 4, 514, 128)])
def test_speculative_decode_on_gpu(b: int, hkv: int, group: int, nq: int, skv: int, chunk: int) -> None:
    """decode_spec_ws then decode_combine against torch in float64: q[B, NQ, H, D] at the cache's last NQ
    positions, causal among them, passed as head-major rows [B, H * NQ, D]."""
    import torch

    from argus.interp.run import compare

    d = 128
    ns = -(-skv // chunk)
    h = hkv * group
    q = torch.randn(b, nq, h, d, device="cuda").to(torch.bfloat16)
    kk = torch.randn(b, hkv, skv, d, device="cuda").to(torch.bfloat16)
    v = torch.randn(b, hkv, skv, d, device="cuda").to(torch.bfloat16)
    rows = q.transpose(1, 2).reshape(b, h * nq, d).contiguous()
    t = {"Q": rows, "K": kk, "V": v, "OP": torch.full((b, h * nq, ns, d), float("nan"), device="cuda"),
         "LP": torch.full((b, h * nq, ns), float("nan"), device="cuda"),
         "O": torch.full((b, h * nq, d), float("nan"), device="cuda", dtype=torch.bfloat16)}
    split = _kernel("decode_attention.arg", "decode_spec_ws", {"GROUP": group, "NQ": nq, "CHUNK": chunk})
    _layer_run([split, _kernel("decode_attention.arg", "decode_combine", {})], t, {})
    kr = kk.double().repeat_interleave(group, dim=1)
    vr = v.double().repeat_interleave(group, dim=1)
    s = torch.einsum("bqhd,bhkd->bhqk", q.double(), kr) / d ** 0.5
    qpos = skv - nq + torch.arange(nq, device="cuda")
    s = s.masked_fill(torch.arange(skv, device="cuda")[None, :] > qpos[:, None], float("-inf"))
    ref = torch.einsum("bhqk,bhkd->bhqd", torch.softmax(s, dim=-1), vr).reshape(b, h * nq, d).cpu().numpy()
    c = compare("O", t["O"].float().cpu().numpy(), ref, DTYPES["bf16"])
    assert c.ok, c.describe()


@gpu
@pytest.mark.parametrize("how", ["layer", "tt-route"])
def test_splitk_layer_on_gpu(how: str) -> None:
    """The split-K layer called by name, and gemm_ws's route to gemm_tt_splitk when both operands are
    transposed views (gemm_ws_at_bt -> gemm_tt -> its split-K route)."""
    import torch

    import argus
    from argus.interp.run import compare

    m, n, k = 256, 136, 20000
    if how == "layer":
        a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
        b = torch.randn(k, n, device="cuda").to(torch.bfloat16)
        run = argus.load(EXAMPLES / "gemm_ws.arg", "gemm_ws_splitk")  # gemm_splitk, then splitk_reduce
    else:
        a = torch.randn(k, m, device="cuda").to(torch.bfloat16).t()
        b = torch.randn(n, k, device="cuda").to(torch.bfloat16).t()
        run = argus.load(EXAMPLES / "gemm_ws.arg")
        assert argus.load(EXAMPLES / "gemm_ws.arg", "gemm_tt").specialized({"M": m, "N": n, "K": k}).name == \
            "gemm_tt_splitk"
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    run(a, b, c)
    torch.cuda.synchronize()
    r = compare("C", c.float().cpu().numpy(), (a.double() @ b.double()).cpu().numpy(), DTYPES["bf16"])
    assert r.ok, r.describe()


@gpu
@pytest.mark.parametrize(("m", "n", "k"), [(256, 144, 40000), (16, 136, 1008), (200, 136, 80)],
                         ids=["splitk", "decode", "small-tiles"])
def test_fp8_routes_on_gpu(m: int, n: int, k: int) -> None:
    """argus.load("gemm_fp8.arg")(A, B, C, scales) as a user calls it: the split-K layer for a long K (its
    chunks summed in fp32: a K of 40000 in one wgmma accumulator is less exact), few rows, few tiles."""
    import torch

    import argus
    from argus.interp.run import compare

    g = torch.Generator(device="cuda")
    g.manual_seed(m + n + k)
    a = torch.randn(m, k, device="cuda", generator=g).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda", generator=g).to(torch.float8_e4m3fn)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    fp8 = argus.load(EXAMPLES / "gemm_fp8.arg")
    want = {"splitk": "gemm_fp8_splitk", "decode": "gemm_fp8_decode", "small-tiles": "gemm_fp8"}
    assert fp8.specialized({"M": m, "N": n, "K": k}).name in want.values()
    fp8(a, b, c, scale_a=0.5, scale_b=0.25)
    torch.cuda.synchronize()
    ref = (a.double() @ b.double().t()) * 0.125
    r = compare("C", c.float().cpu().numpy(), ref.cpu().numpy(), DTYPES["bf16"])
    assert r.ok, r.describe()


@gpu
@pytest.mark.parametrize(("layout", "construct"), CONSTRUCT_CASES, ids=[f"{a}-{b}" for a, b in CONSTRUCT_CASES])
def test_construct_on_gpu(layout: str, construct: str) -> None:
    k = build_kernel(parse(kernel_source(layout, construct), f"{layout}_{construct}.arg").kernels[0], {})
    whole = any(w in construct for w in ("axis0", "col_stats", "keepdims_cols"))  # one block holds the rows it reduces
    shapes = ({"M": 64, "N": 64, "K": 32},) if whole else ({"M": 150, "N": 64, "K": 32}, {"M": 64, "N": 64, "K": 40})
    for dims in shapes:
        _check(k, {d: v for d, v in dims.items() if d in k.dims}, seed=3)


@gpu
def test_argus_run_runs_a_layer_on_gpu(capsys) -> None:
    from argus.cli import main

    assert main(["run", str(EXAMPLES / "gemm_ws.arg"), "--kernel", "gemm_ws_splitk", "--gpu", "-D", "M=200",
                 "-D", "N=136", "-D", "K=20000", "-D", "KCHUNK=4096"]) == 0
    assert "ok   C" in capsys.readouterr().out

