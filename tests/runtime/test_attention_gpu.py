"""examples/flash_attention.arg on the GPU: generated CUDA against the float64 reference.

Each case draws fresh random inputs (argus.interp.run.make_arrays: normal values, never zeros), poisons
O with NaN, launches once and compares with the kernel's `reference:` block evaluated in float64 (the
interpreter's criterion, argus.runtime.bench.check_on_gpu). Cases cover head dims 64 and 128, causal
and not, GROUP 1 and 4 (grouped-query attention), sequence lengths that are not tile multiples, SQ !=
SKV both ways, the mma.sync variant, examples/flash_attention_ws.arg (TMA producer warpgroup) and
FlashAttention-3's order (tests/analysis/corpus/correct/fa_ws_pipelined_pv*.arg).
Marked `gpu`: skipped without a GPU.
"""

from __future__ import annotations

import pytest

pytest.importorskip("cuda.bindings.driver")

from argus.ir.build import build_file  # noqa: E402
from tests.conftest import EXAMPLES  # noqa: E402
from tests.runtime.test_driver_gpu import ARCH, gpu  # noqa: E402

FA = EXAMPLES / "flash_attention.arg"
WS = "flash_attention_ws.arg"  # a case whose params carry FILE=WS builds that example instead
PERSIST = "flash_attention_ws_persistent"  # KERNEL=...: that kernel of the file
# FlashAttention-3's order (a ring consumer holding two stages; codegen/held_release.py); its last P·V is
# guarded by n_kv > 0 since 2026-12-06 (a causal block with no key read and released an unfilled stage)
FA3E = "flash_attention_ws_fa3"  # the same order in examples/flash_attention_ws.arg (its route past 8k queries)
FA3 = "../tests/analysis/corpus/correct/fa_ws_pipelined_pv.arg"
FA3B = "../tests/analysis/corpus/correct/fa_ws_pipelined_pv_bf16.arg"

# (params, (B, HKV, SQ, SKV))
CASES = [
    ({"HD": 128}, (2, 3, 256, 256)),
    ({"HD": 128}, (1, 2, 200, 333)),
    ({"HD": 64}, (2, 2, 333, 200)),
    ({"HD": 64, "BKV": 64, "CAUSAL": True}, (1, 2, 333, 517)),
    ({"HD": 128, "CAUSAL": True}, (1, 2, 200, 333)),
    ({"HD": 64, "CAUSAL": True}, (2, 2, 256, 256)),
    ({"HD": 128, "GROUP": 4}, (1, 2, 200, 333)),
    ({"HD": 64, "GROUP": 4, "CAUSAL": True}, (1, 1, 333, 200)),  # SQ > SKV: the first rows see no key (NaN)
    ({"HD": 128, "CAUSAL": True, "GROUP": 4}, (2, 1, 129, 1000)),
    ({"HD": 128, "BKV": 128}, (1, 2, 200, 333)),
    ({"HD": 128, "BQ": 64, "WARPGROUPS": 1}, (1, 2, 200, 333)),
    ({"HD": 64, "BQ": 192, "WARPGROUPS": 3, "CAUSAL": True}, (1, 2, 400, 333)),
    ({"HD": 64, "MMA": "mma.sync"}, (1, 2, 200, 333)),
    ({"HD": 128, "MMA": "mma.sync", "CAUSAL": True, "GROUP": 4}, (1, 1, 200, 333)),
    ({"FILE": WS, "HD": 128}, (2, 3, 256, 256)),
    ({"FILE": WS, "HD": 128, "CAUSAL": True, "GROUP": 4}, (2, 1, 129, 1000)),
    ({"FILE": WS, "HD": 64, "CAUSAL": True}, (1, 2, 333, 517)),
    ({"FILE": WS, "HD": 64, "GROUP": 4, "CAUSAL": True}, (1, 1, 333, 200)),
    # the persistent kernel (a per-tile Q ring beside the K/V ring); SMS=3 gives each block many tiles
    ({"FILE": WS, "KERNEL": PERSIST, "HD": 128}, (2, 3, 256, 256)),
    ({"FILE": WS, "KERNEL": PERSIST, "HD": 128, "SMS": 3}, (1, 2, 200, 333)),
    ({"FILE": WS, "KERNEL": PERSIST, "HD": 128, "CAUSAL": True, "GROUP": 4, "SMS": 5}, (2, 1, 129, 1000)),
    ({"FILE": WS, "KERNEL": PERSIST, "HD": 64, "CAUSAL": True, "SMS": 3}, (1, 2, 333, 517)),
    ({"FILE": WS, "KERNEL": PERSIST, "HD": 64, "GROUP": 4, "CAUSAL": True, "SMS": 2}, (1, 1, 333, 200)),
    ({"FILE": WS, "KERNEL": PERSIST, "HD": 256, "CAUSAL": True, "SMS": 4}, (2, 2, 300, 300)),
    ({"FILE": FA3, "HD": 128, "BKV": 64, "STAGES": 4}, (2, 3, 256, 256)),
    ({"FILE": FA3, "HD": 128}, (1, 2, 200, 333)),
    ({"FILE": FA3, "HD": 128, "BKV": 64, "STAGES": 2, "CAUSAL": True, "GROUP": 4}, (2, 1, 129, 1000)),
    ({"FILE": FA3, "HD": 64, "CAUSAL": True}, (1, 2, 333, 517)),
    ({"FILE": FA3B, "HD": 128, "BKV": 64, "STAGES": 4}, (1, 2, 200, 333)),
    ({"FILE": FA3, "HD": 64, "GROUP": 4, "CAUSAL": True}, (1, 1, 333, 200)),  # SQ > SKV: blocks with no key
    ({"FILE": WS, "KERNEL": FA3E, "HD": 128}, (1, 2, 200, 333)),
    ({"FILE": WS, "KERNEL": FA3E, "HD": 128, "CAUSAL": True, "GROUP": 4}, (2, 1, 129, 1000)),
    ({"FILE": WS, "KERNEL": FA3E, "HD": 128, "CAUSAL": True}, (1, 2, 333, 200)),
    ({"FILE": WS, "KERNEL": FA3E, "HD": 64, "CAUSAL": True}, (1, 2, 333, 517)),
    # ping-pong: the consumer warpgroups issue in turns (`with turn()`, named barriers 8 + w)
    ({"FILE": WS, "KERNEL": FA3E, "HD": 128, "PINGPONG": True}, (1, 2, 200, 333)),
    ({"FILE": WS, "KERNEL": FA3E, "HD": 128, "PINGPONG": True, "CAUSAL": True, "GROUP": 4}, (2, 1, 129, 1000)),
    ({"FILE": WS, "KERNEL": FA3E, "HD": 64, "PINGPONG": True, "CAUSAL": True}, (1, 2, 333, 517)),
    ({"FILE": WS, "KERNEL": FA3E, "HD": 64, "PINGPONG": True, "GROUP": 4, "CAUSAL": True}, (1, 1, 333, 200)),
    ({"FILE": WS, "KERNEL": PERSIST, "HD": 128, "PINGPONG": True, "SMS": 3}, (1, 2, 200, 333)),
    ({"FILE": WS, "KERNEL": PERSIST, "HD": 128, "PINGPONG": True, "CAUSAL": True, "GROUP": 4, "SMS": 5},
     (2, 1, 129, 1000)),
]


def _build(params: dict):
    from argus.codegen.compile import build

    params = dict(params)
    path = EXAMPLES / params.pop("FILE") if "FILE" in params else FA
    return build(build_file(path, params, params.pop("KERNEL", None)), arch=ARCH)


@pytest.fixture(scope="module", autouse=True)
def _warm_cache() -> None:
    """Compile every case in parallel processes first (the disk cache then serves the tests)."""
    if ARCH is None:
        return
    import concurrent.futures as cf
    import multiprocessing as mp

    with cf.ProcessPoolExecutor(max_workers=8, mp_context=mp.get_context("spawn")) as pool:
        list(pool.map(_warm_one, [p for p, _ in CASES]))


def _warm_one(params: dict) -> None:
    _build(params)


def _id(case) -> str:
    params, (b, hkv, sq, skv) = case
    return "-".join(f"{k}={v}" for k, v in params.items()) + f"-B{b}-HKV{hkv}-{sq}x{skv}"


@gpu
@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_flash_attention_on_gpu(case) -> None:
    from argus.runtime.bench import check_on_gpu
    from argus.runtime.launch import GpuKernel

    params, (b, hkv, sq, skv) = case
    group = int(params.get("GROUP", 1))
    dims = {"B": b, "H": hkv * group, "HKV": hkv, "SQ": sq, "SKV": skv, "D": int(params["HD"])}
    gk = GpuKernel(_build(params), 0)
    for seed in (1, 2):
        checks, _ = check_on_gpu(gk, dims, seed=seed + sq + skv)
        for c in checks:
            assert c.ok, f"{_id(case)} seed {seed}: {c.describe()}"


VARLEN = EXAMPLES / "flash_attention_varlen.arg"
# (params, dims): packed sequences whose offsets (cu) the GPU check draws from the kernel's contract
VARLEN_CASES = [
    ({"HD": 128}, {"T": 700, "H": 2, "HKV": 2, "D": 128, "B1": 4}),
    ({"HD": 128, "CAUSAL": True}, {"T": 1000, "H": 2, "HKV": 2, "D": 128, "B1": 6}),
    ({"HD": 64, "CAUSAL": True, "GROUP": 2}, {"T": 333, "H": 4, "HKV": 2, "D": 64, "B1": 3}),
    ({"HD": 256}, {"T": 300, "H": 1, "HKV": 1, "D": 256, "B1": 3}),
]


@gpu
@pytest.mark.parametrize("case", VARLEN_CASES, ids=lambda c: "-".join(f"{k}{v}" for k, v in c[0].items()))
def test_varlen_attention_on_gpu(case) -> None:
    from argus.codegen.compile import build
    from argus.runtime.bench import check_on_gpu
    from argus.runtime.launch import GpuKernel

    params, dims = case
    gk = GpuKernel(build(build_file(VARLEN, params), arch=ARCH), 0)
    for seed in (1, 2):
        checks, _ = check_on_gpu(gk, dims, seed=seed)
        for c in checks:
            assert c.ok, f"{params} {dims} seed {seed}: {c.describe()}"


def test_flash_attention_ws_routes_by_shape() -> None:
    """Persistent for short sequences (64-key steps when causal at D=128) and non-causal D >= 128 up to 8k
    queries, FA3's order with ping-pong past 8k queries at D=128 and causal past 1k, else the first kernel
    (examples/flash_attention_ws.arg, the measured rule in its comment)."""
    import argus

    def name(sq: int, hd: int, causal: bool) -> str:
        dims = {"B": 1, "H": 2, "HKV": 2, "D": hd, "SKV": sq, "SQ": sq}
        return argus.load(EXAMPLES / WS, HD=hd, CAUSAL=causal).specialized(dims).name

    assert name(512, 128, True) == name(1024, 64, False) == PERSIST
    short = argus.load(EXAMPLES / WS, HD=128, CAUSAL=True).specialized({"B": 1, "H": 2, "HKV": 2, "D": 128,
                                                                         "SKV": 1024, "SQ": 1024})
    assert short.name == PERSIST and (short.params["BKV"], short.params["STAGES"]) == (64, 4)  # short causal
    plain = argus.load(EXAMPLES / WS, HD=128).specialized({"B": 1, "H": 2, "HKV": 2, "D": 128, "SKV": 512, "SQ": 512})
    assert plain.name == PERSIST and plain.params.get("BKV", 128) == 128  # non-causal keeps its 128-key steps
    assert name(4096, 128, False) == name(8192, 256, False) == PERSIST
    assert name(4096, 64, True) == name(4096, 64, False) == name(16384, 64, False) == "flash_attention_ws"
    assert name(4096, 256, True) == "flash_attention_ws"
    assert name(16384, 128, False) == name(8200, 128, True) == name(4096, 128, True) == name(2048, 128, True) == FA3E
    pp = argus.load(EXAMPLES / WS, HD=128, CAUSAL=True).specialized({"B": 1, "H": 2, "HKV": 2, "D": 128,
                                                                      "SKV": 4096, "SQ": 4096})
    assert pp.params["PINGPONG"] is True and pp.params["CAUSAL"] is True

    k = argus.load(EXAMPLES / WS, HD=64, CAUSAL=True)  # params the reference reads go with the route
    dims = {"B": 1, "H": 2, "HKV": 2, "D": 64, "SKV": 517}
    routed = k.specialized({**dims, "SQ": 333})
    assert routed.name == PERSIST and routed.params["HD"] == 64 and routed.params["CAUSAL"] is True
    assert k.specialized({**dims, "SQ": 16384}) is k
    assert argus.load(EXAMPLES / WS, HD=64, BKV=64).specialized({**dims, "SQ": 333}).name == "flash_attention_ws"


@gpu
def test_the_routed_call_on_torch_tensors() -> None:
    import torch

    import argus
    from argus.dsl.types import DTYPES
    from argus.interp.run import compare

    b, h, hkv, sq, skv, d = 2, 4, 2, 333, 517, 64
    g = torch.Generator(device="cuda").manual_seed(7)
    q = torch.randn((b, h, sq, d), device="cuda", generator=g).to(torch.bfloat16)
    kk, v = (torch.randn((b, hkv, skv, d), device="cuda", generator=g).to(torch.bfloat16) for _ in range(2))
    o = torch.full((b, h, sq, d), float("nan"), device="cuda", dtype=torch.bfloat16)
    lse = torch.full((b, h, sq), float("nan"), device="cuda", dtype=torch.float32)
    argus.load(EXAMPLES / WS, HD=d, CAUSAL=True, GROUP=h // hkv)(q, kk, v, o, lse)
    torch.cuda.synchronize()
    kr, vr = kk.double().repeat_interleave(h // hkv, 1), v.double().repeat_interleave(h // hkv, 1)
    s = q.double() @ kr.transpose(-1, -2) / d ** 0.5
    s = s.masked_fill(torch.ones(sq, skv, dtype=torch.bool, device="cuda").triu(skv - sq + 1), float("-inf"))
    ref = torch.softmax(s, -1) @ vr
    chk = compare("O", o.float().cpu().numpy(), ref.cpu().numpy(), DTYPES["bf16"])
    assert chk.ok, chk.describe()
    chk = compare("LSE", lse.cpu().numpy(), torch.logsumexp(s, -1).cpu().numpy(), DTYPES["f32"])
    assert chk.ok, chk.describe()
