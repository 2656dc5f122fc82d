"""CUDA generation: golden sources, NVRTC builds of every example, errors at `.arg` lines. No GPU needed.

Golden files under tests/codegen/golden are rewritten only with ARGUS_UPDATE_GOLDEN=1.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

pytest.importorskip("cuda.bindings.nvrtc")

from argus.cli import main  # noqa: E402
from argus.codegen import compile as cc  # noqa: E402
from argus.codegen.compile import build  # noqa: E402
from argus.codegen.emit import generate  # noqa: E402
from argus.dsl.diagnostics import ArgusError  # noqa: E402
from argus.ir.build import build_file, build_source  # noqa: E402
from tests.conftest import EXAMPLES, ROOT  # noqa: E402

GOLDEN = Path(__file__).parent / "golden"
EXAMPLE_FILES = sorted(p for p in EXAMPLES.glob("*.arg"))

SCALE_ROWS = """
kernel scale_rows(X: f32[R, C], Y: f32[R, C], alpha: f32 = 2.0):
    param BR = 32
    launch grid=(cdiv(R, BR),), threads=128
    r = block_id(0)
    x = load(X[r * BR : +BR, 0:+64])
    store(Y[r * BR : +BR, 0:+64], select(x > 0.0, x * alpha, exp2(x)))
reference:
    Y = where(X > 0, X * alpha, exp2(X))
"""


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("mma", ["wgmma", "mma.sync"])
def test_gemm_cuda_golden(mma: str) -> None:
    k = build_file(EXAMPLES / "gemm.arg", {"MMA": mma})
    src = generate(k, "examples/gemm.arg").source
    path = GOLDEN / f"gemm_{mma.replace('.', '_')}.cu"
    if os.environ.get("ARGUS_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(exist_ok=True)
        path.write_text(src)
    assert path.exists(), f"missing golden file {path}; create it with ARGUS_UPDATE_GOLDEN=1"
    assert src == path.read_text(), f"generated CUDA changed; if intended, rerun with ARGUS_UPDATE_GOLDEN=1 ({path})"


# Examples that need constructs the code generator does not emit yet (row reductions and broadcasts of
# mma fragments, an mma whose A operand is in registers): each must fail cleanly, at a source line.
NOT_YET = {"flash_attention.arg": "row reductions / broadcasts of mma fragments and register-A mma"}


def _variants() -> list:
    def marks(p: Path) -> list:
        return [pytest.mark.xfail(raises=ArgusError, strict=True, reason=NOT_YET[p.name])] if p.name in NOT_YET else []

    out = [pytest.param(p, {}, id=p.name, marks=marks(p)) for p in EXAMPLE_FILES]
    out.append(pytest.param(EXAMPLES / "gemm.arg", {"MMA": "mma.sync"}, id="gemm.arg-mma.sync"))
    return out


@pytest.mark.parametrize(("path", "params"), _variants())
def test_every_example_compiles(path: Path, params: dict) -> None:
    """sm_90a always; sm_80 too when the kernel uses no sm_90a instruction."""
    k = build_file(path, params)
    try:
        gen = generate(k, _rel(path))
    except ArgusError as e:
        d = e.diagnostics[0]
        assert d.code == "codegen" and d.span is not None and d.span.line > 0  # a clean report, not a crash
        raise
    archs = ["sm_90a"] if gen.needs_sm90a else ["sm_90a", "sm_80"]
    for arch in archs:
        b = build(k, arch=arch, path=_rel(path), cache=False)
        (res,) = b.resources.values()
        assert res.registers > 0 and res.spill_store_bytes is not None
        assert b.result.cubin[:4] == b"\x7fELF"
        assert f'#line {k.span.line} "{_rel(path)}"' in gen.source


def test_bug_examples_generate() -> None:
    """The verifier's broken variants are valid programs: the code generator emits them all (the
    FlashAttention ones need what flash_attention.arg needs, see NOT_YET)."""
    for path in sorted((EXAMPLES / "bugs").glob("*.arg")):
        try:
            generate(build_file(path), _rel(path))
        except ArgusError as e:
            assert path.name.startswith("fa_") and e.diagnostics[0].code == "codegen", path.name


def test_gemm_ws_structure() -> None:
    gen = generate(build_file(EXAMPLES / "gemm_ws.arg"), "examples/gemm_ws.arg")
    src = gen.source
    assert gen.needs_sm90a and {"tma", "wgmma", "mbarrier", "setmaxnreg"} <= gen.features
    assert [(t.tensor, t.box_rows, t.box_cols, t.swizzle) for t in gen.tensor_maps] == \
        [("A", 128, 64, 128), ("B", 64, 64, 128)]
    assert "ag_setmaxnreg_dec<40>();" in src and "ag_setmaxnreg_inc<232>();" in src
    assert "__launch_bounds__(384, 1)" in src and "const __grid_constant__ AgTmaMap ag_tm1" in src
    assert src.count("ag_tma_load_2d(") == 1 + 4 + 1  # one A box, four B boxes per stage (+ the helper)
    assert "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16" in src
    # the consumers' `arrive` becomes one arrival per warp: the empty barriers count 8 per phase
    assert "ag_mbar_init(ag_smem + 196640u + 8u * ag_i, 8u)" in src
    assert gen.smem_bytes == 4 * (128 * 64 + 64 * 256) * 2 + 64 + 1024


def test_wgmma_wait_is_deferred_to_the_next_barrier() -> None:
    """The steady-state loop waits for the previous k-step's wgmma after its cp.async wait (overlapping
    them) and before the barrier that lets the stage be overwritten; eager mode waits at once."""
    k = build_file(EXAMPLES / "gemm.arg")
    deferred = generate(k, defer_wgmma=True).source
    loop = deferred[deferred.index("for (int k = 0;"):]
    order = [loop.index(x) for x in ("ag_cp_async_wait<1>();", "ag_wgmma_wait<0>();", "__syncthreads();",
                                     "ag_cp_async16(", "ag_wgmma_commit();")]
    assert order == sorted(order)
    assert deferred.count("ag_wgmma_wait<0>();") == 4  # steady loop, before the epilogue loop, in it, before the store
    eager = generate(k, defer_wgmma=False).source
    commit = eager.index("ag_wgmma_commit();")
    assert eager[commit:].split("\n")[1].strip() == "ag_wgmma_wait<0>();"
    # warp-specialised: the stage is released right after the mma either way
    ws = generate(build_file(EXAMPLES / "gemm_ws.arg"), defer_wgmma=True).source
    ws = ws[ws.index('extern "C"'):]
    assert ws.index("ag_wgmma_wait<0>();") < ws.index("ag_mbar_arrive(") and ws.count("ag_wgmma_wait<0>();") == 1


def test_elementwise_kernel_vectorises_and_compiles() -> None:
    k = build_source(SCALE_ROWS)
    b = build(k, arch="sm_80", cache=False)
    src = b.generated.source
    assert "ag_vec<float, 4>" in src and "exp2f(" in src
    assert b.generated.min_sm == 80 and b.generated.smem_bytes == 0


def test_compile_error_reports_the_arg_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """A generated kernel NVRTC rejects is reported at the `.arg` statement it came from."""
    k = build_file(EXAMPLES / "gemm.arg", {"MMA": "mma.sync"})
    real = generate

    def broken(kernel, path=None, **options):
        g = real(kernel, path, **options)
        marker = '#line 27 "examples/gemm.arg"\n'
        assert marker in g.source
        return dataclasses.replace(g, source=g.source.replace(marker, marker + "  ag_no_such_helper();\n", 1))

    monkeypatch.setattr(cc, "generate", broken)
    with pytest.raises(ArgusError) as info:
        build(k, arch="sm_80", path="examples/gemm.arg", cache=False)
    d = info.value.diagnostics[0]
    assert d.code == "nvrtc" and "ag_no_such_helper" in d.message
    assert d.span.path.endswith("examples/gemm.arg") and d.span.line == 27 and d.span.col == 9


def test_wgmma_for_sm80_is_an_error_at_the_mma() -> None:
    k = build_file(EXAMPLES / "gemm.arg")
    with pytest.raises(ArgusError) as info:
        build(k, arch="sm_80", cache=False)
    d = info.value.diagnostics[0]
    assert d.code == "arch" and d.span.line == 27 and "wgmma" in d.message


def test_unsupported_construct_points_at_its_line() -> None:
    src = SCALE_ROWS.replace("store(Y[r * BR : +BR, 0:+64], select(x > 0.0, x * alpha, exp2(x)))",
                             "store(Y[r * BR : +BR, 0:+1], sum(x, axis=1)[:, None])")
    with pytest.raises(ArgusError) as info:
        generate(build_source(src))
    d = info.value.diagnostics[0]
    assert d.code == "codegen" and d.span.line == 7


def test_register_budget_is_checked() -> None:
    src = (EXAMPLES / "gemm_ws.arg").read_text().replace("registers=232", "registers=256")
    with pytest.raises(ArgusError) as info:
        generate(build_source(src))
    assert "65536" in info.value.diagnostics[0].message


def test_cli_build_writes_the_artefact_and_reports_resources(tmp_path: Path, capsys,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "gemm.cu"
    assert main(["build", "examples/gemm.arg", "-D", "MMA=mma.sync", "--arch", "sm_80", "--emit", "cuda",
                 "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "registers" in text and "spill" in text and "stack frame" in text
    assert out.read_text().startswith("// Generated by Argus from examples/gemm.arg")
    cubin = tmp_path / "g.cubin"
    assert main(["build", "examples/gemm_ws.arg", "--arch", "sm_90a", "-o", str(cubin), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    (kern,) = report["kernels"]
    assert kern["registers"] == 168 and kern["spill_store_bytes"] == 0 and kern["dynamic_smem_bytes"] > 190_000
    assert cubin.read_bytes()[:4] == b"\x7fELF"


def test_cli_build_error_is_rendered_at_the_source(capsys) -> None:
    assert main(["build", "examples/gemm.arg", "--arch", "sm_80", "-o", os.devnull]) == 1
    err = capsys.readouterr().err
    assert "examples/gemm.arg:27:15: error" in err and "acc = mma(" in err
