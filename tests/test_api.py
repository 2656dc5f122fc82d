"""The Python API as a user meets it: lower / verify / call, and errors that print their place."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

import argus
from argus.analysis import Report
from argus.cli import main
from argus.dsl.diagnostics import ArgusError
from argus.interp.numerics import round_bf16
from argus.runtime.arrays import ArgumentError
from tests.conftest import EXAMPLES

BUG = EXAMPLES / "bugs" / "oob_shared_stage_plus_one.arg"


def _verdicts(j: dict) -> dict:
    """What a check record says, without timings and counterexample values (Z3 may pick another model,
    which the message quotes)."""
    return {"kernel": j["kernel"], "status": j["status"], "checks": [(c["check"], c["status"]) for c in j["checks"]],
            "findings": [(f["check"], f["status"], f["span"], f["invariant"],
                          sorted(f["counterexample"] or {}), (f["replay"] or {}).get("confirmed"))
                         for f in j["findings"]]}


def test_verify_is_what_argus_check_reports(capsys, monkeypatch, tmp_path):
    v = argus.load(BUG).verify(M=256, N=256, K=192)
    assert isinstance(v.report, Report) and v.status == "violated" and v.kernel == "gemm"
    violated = {r.check for r in v.results if r.status == "violated"}
    assert "oob-shared" in violated
    f = next(f for f in v.findings if f.check == "oob-shared")
    assert f.counterexample is not None and f.counterexample.dims["K"] == 192
    assert f.replay is not None and f.replay.confirmed
    assert v.to_json()["schema_version"] == 1 and v.seconds > 0
    assert "error" in str(v) and "oob-shared" in str(v)  # the human report argus check prints

    import argus.verification as verification

    # argus check verifies in its bounded child process (forked): what verify_kernel returned there comes
    # back through a file
    seen = tmp_path / "seen.jsonl"
    real = verification.verify_kernel

    def spy(*a, **k):
        v = real(*a, **k)
        with open(seen, "a") as f:
            f.write(json.dumps(v.to_json(), default=str) + "\n")
        return v

    monkeypatch.setattr(verification, "verify_kernel", spy)
    assert main(["check", str(BUG), "-D", "M=256", "-D", "N=256", "-D", "K=192", "--format", "json"]) == 1
    cli = json.loads(capsys.readouterr().out)
    (mine,) = [json.loads(ln) for ln in seen.read_text().splitlines()]
    assert mine == cli  # the CLI prints exactly to_json()
    assert _verdicts(v.to_json()) == _verdicts(cli)  # and the API's own run says the same


def test_verify_has_the_bounds_of_argus_check(capsys):
    """A fixed trip count too long to walk is a prompt unknown from Kernel.verify as from argus check (the
    same argus.verification path), and a dim out of range is an error from both."""
    gemm = EXAMPLES / "gemm.arg"
    v = argus.load(gemm).verify(K=1000000000)
    assert v.status == "unknown" and "15624998 steps" in v.notes[0] and v.findings == []
    assert {r.status for r in v.results} == {"unknown"} and "unknown" in str(v)
    assert main(["check", str(gemm), "-D", "K=1000000000", "--format", "json"]) == 2
    cli = json.loads(capsys.readouterr().out)
    assert _verdicts(cli) == _verdicts(v.to_json()) and cli["notes"] == v.notes
    with pytest.raises(ArgusError, match="dimension K"):
        argus.load(gemm).verify(K=2 ** 32)
    assert main(["check", str(gemm), "-D", "K=4294967296"]) == 1 and "[dims]" in capsys.readouterr().err


def test_verify_binds_params_and_dims():
    v = argus.load(EXAMPLES / "gemm.arg", MMA="mma.sync").verify(M=200, N=136, K=72, replay=False)
    assert v.status == "verified" and v.findings == [] and v.to_json()["status"] == "verified"
    assert v.ir is not None and v.ir.param_dict["MMA"] == "mma.sync"


def test_check_is_a_deprecated_alias_of_lower():
    k = argus.load(EXAMPLES / "gemm.arg")
    with pytest.warns(DeprecationWarning, match="lower"):
        ir = k.check()
    assert ir == k.lower()


def test_str_of_an_error_is_the_located_cli_message(tmp_path, capsys):
    bad = tmp_path / "bad.arg"
    bad.write_text("kernel k(A: f32[N]):\n    launch grid=(1,), threads=32\n    x = y\n")
    with pytest.raises(ArgusError) as info:
        argus.load(bad).lower()
    text = str(info.value)
    assert text.splitlines()[0] == f"{bad}:3:9: error: undefined name 'y' [undefined-name]"
    assert "    x = y" in text and "^" in text and info.value.message == "undefined name 'y'"
    assert main(["check", str(bad)]) == 1
    assert capsys.readouterr().err.rstrip("\n") == text
    again = pickle.loads(pickle.dumps(info.value))  # crosses process boundaries (the tuner's children)
    assert str(again) == text and again.diagnostics == info.value.diagnostics


def _gemm_inputs(m: int, n: int, k: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (round_bf16(rng.standard_normal((m, k)).astype(np.float32)),
            round_bf16(rng.standard_normal((k, n)).astype(np.float32)))


def test_numpy_arguments_are_checked():
    k = argus.load(EXAMPLES / "gemm.arg", BM=64, BN=64)
    A, B = _gemm_inputs(70, 90, 40)
    C = np.full((70, 90), np.nan, np.float32)
    with pytest.raises(ArgumentError) as info:
        k(A.astype(np.float64), B, C)  # the issue: float64 for a bf16 argument was accepted silently
    e = info.value
    assert e.message.startswith("argument A: expected bf16[M, K] (a C-contiguous NumPy float32 array holding "
                                "bf16 values), got float64[70, 40]")
    assert "convert=True" in str(e) and f"{EXAMPLES / 'gemm.arg'}:7:13" in str(e)
    with pytest.raises(ArgumentError, match=r"argument B: .*\(3 dims instead of 2\)"):
        k(A, B[None], C)
    with pytest.raises(ArgumentError, match=r"argument C: expected bf16\[M, N\].*\(N is 90 from argument B\)"):
        k(A, B, np.zeros((70, 91), np.float32))
    with pytest.raises(ArgumentError, match=r"argument B: .*\(not C-contiguous\)"):
        k(A, np.asfortranarray(B), C)
    with pytest.raises(ArgumentError, match="missing array argument"):
        k(A, B)
    with pytest.raises(ArgumentError, match="argument C: expected .*got torch|argument C: expected .*got builtins"):
        k(A, B, [[0.0]])
    assert np.isnan(C).all()  # nothing ran


def test_numpy_conversion_only_when_asked():
    k = argus.load(EXAMPLES / "gemm.arg", BM=64, BN=64)
    A, B = _gemm_inputs(70, 90, 40, seed=1)
    C = np.full((70, 90), np.nan, np.float64)  # an output of another dtype: written back into it
    k(A.astype(np.float64), np.asfortranarray(B), C, convert=True)
    ref = A.astype(np.float64) @ B
    assert np.linalg.norm(C - ref) / np.linalg.norm(ref) < 1e-2


def test_scalars_are_checked():
    from tests.dsl import inline_kernels as m

    X = np.ones((40, 70), np.float32)
    Y = np.full_like(X, np.nan)
    with pytest.raises(ArgumentError, match="argument alpha: expected a f32 scalar, got 'x'"):
        m.scale_rows(X, Y, "x")
    m.scale_rows(X, Y, np.float32(3.0))  # NumPy scalars are numbers
    np.testing.assert_array_equal(Y, 3.0)


def test_gpu_arrays_are_checked_before_any_compile():
    torch = pytest.importorskip("torch")
    k = argus.load(EXAMPLES / "gemm.arg")
    a = torch.zeros(64, 32, dtype=torch.bfloat16)
    with pytest.raises(ArgumentError) as info:
        k(a, a.T.contiguous(), a)
    assert info.value.message.startswith("argument A: expected bf16[M, K] contiguous, got bf16[64, 32] on cpu")
    assert "expected a CUDA tensor" in info.value.message


def test_repr_and_with_params():
    k = argus.load(EXAMPLES / "gemm.arg", BM=64)
    assert repr(k) == f"<argus.Kernel gemm at {EXAMPLES / 'gemm.arg'}:7, BM=64>"
    assert k.with_params(BN=64).lower().param_dict["BN"] == 64 and k.params == {"BM": 64}
