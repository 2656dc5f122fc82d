"""The referee: judges a candidate's correctness and speed without trusting the candidate.

For each evaluation, in a child process with a time limit (a hang or a crash costs one step):
  * compile through the backend;
  * correctness at the planner-visible shapes and at fresh irregular shapes drawn here (never shown
    to the planner): fresh random inputs, outputs poisoned with NaN before the run, the reference
    computed here in float64 from pristine copies of the inputs with the *starting* kernel's
    reference block, every output compared (unwritten elements stay NaN and fail);
  * timing at the target shapes: the backend's device-event samples (inputs rotated), median.
Then in the parent: a time below the speed-of-light floor (datasheet FLOP/s and bandwidth) is
rejected as a measurement error. Without a GPU, times come from the cost model and every figure
carries `estimate: true`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from argus.agent.backend import Backend, CompileFailed
from argus.agent.hardware import H200, Machine
from argus.agent.isolate import run_isolated
from argus.agent.program import Candidate
from argus.agent.shapes import Shape, hidden_shapes
from argus.agent.workload import floor_seconds, min_bytes, useful_flops

STATUSES = ("ok", "compile-error", "wrong", "timeout", "fault", "rejected", "error")


@dataclass(frozen=True)
class ShapeCheck:
    dims: dict[str, int]
    hidden: bool
    ok: bool
    outputs: tuple[dict[str, Any], ...] = ()
    error: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"dims": self.dims, "hidden": self.hidden, "ok": self.ok, "outputs": list(self.outputs),
                "error": self.error}


@dataclass(frozen=True)
class ShapeTiming:
    dims: dict[str, int]
    median_s: float
    samples: int
    tflops: float  # useful FLOPs / median
    floor_s: float  # speed-of-light floor from datasheet figures
    estimate: bool
    energy_j: float | None = None
    p10_s: float | None = None
    p90_s: float | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"dims": self.dims, "median_s": self.median_s, "samples": self.samples, "tflops": self.tflops,
                "floor_s": self.floor_s, "estimate": self.estimate, "energy_j": self.energy_j,
                "p10_s": self.p10_s, "p90_s": self.p90_s, "details": self.details}


@dataclass(frozen=True)
class Evaluation:
    status: str
    message: str = ""
    compile: dict[str, Any] = field(default_factory=dict)
    checks: tuple[ShapeCheck, ...] = ()
    timings: tuple[ShapeTiming, ...] = ()
    estimate: bool = True
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "message": self.message, "compile": self.compile,
                "checks": [c.to_json() for c in self.checks], "timings": [t.to_json() for t in self.timings],
                "estimate": self.estimate, "seconds": round(self.seconds, 3)}

    @staticmethod
    def from_json(d: dict[str, Any]) -> Evaluation:
        return Evaluation(d["status"], d.get("message", ""), d.get("compile", {}),
                          tuple(ShapeCheck(**{**c, "outputs": tuple(c.get("outputs", ()))})
                                for c in d.get("checks", [])),
                          tuple(ShapeTiming(**t) for t in d.get("timings", [])), d.get("estimate", True),
                          d.get("seconds", 0.0))


@dataclass(frozen=True)
class RefereeConfig:
    check_shapes: tuple[Shape, ...]  # planner-visible correctness shapes
    time_shapes: tuple[Shape, ...]  # the targets
    hidden: int = 2  # unseen irregular shapes per evaluation
    fixed_dims: frozenset[str] = frozenset()
    timeout_s: float = 120.0
    reps: int = 30
    input_sets: int = 4
    machine: Machine = H200


def _describe_check(c) -> dict[str, Any]:
    return {"name": c.name, "ok": c.ok, "rel_error": c.rel_error, "tolerance": c.tolerance, "wrong": c.bad,
            "unwritten": c.nonfinite, "first_wrong": list(c.first_bad) if c.first_bad else None}


def trial(backend: Backend, source: str, defines: dict, kernel: str | None, ref_source: str, ref_defines: dict,
          ref_kernel: str | None, checks: list[tuple[Shape, bool]], times: list[Shape], seed: int, reps: int,
          input_sets: int) -> dict[str, Any]:
    """Runs in the child process. Returns plain data only."""
    from argus.agent.gate import build_cached
    from argus.dsl.diagnostics import ArgusError
    from argus.dsl.reference import evaluate_reference
    from argus.interp.run import compare, make_arrays, resolve_scalars

    ref = build_cached(ref_source, tuple(sorted(ref_defines.items())), ref_kernel)
    try:
        compiled = backend.compile(source, defines, kernel)
    except CompileFailed as e:
        return {"stage": "compile", "error": str(e), "report": e.report}
    except ArgusError as e:
        return {"stage": "compile", "error": "; ".join(d.message for d in e.diagnostics), "report": {}}
    out: dict[str, Any] = {"stage": "done", "report": compiled.report, "checks": [], "timings": []}
    for i, (dims, hidden) in enumerate(checks):
        rng = np.random.default_rng([seed, i])
        arrays = make_arrays(ref, dims, rng)  # fresh inputs; outputs poisoned (NaN / -1)
        pristine = {n: a.copy() for n, a in arrays.items()}
        scalars = resolve_scalars(ref, dims)
        try:
            got = backend.execute(compiled, arrays, dims, scalars)
        except ArgusError as e:
            d = e.diagnostics[0]
            out["checks"].append({"dims": dims, "hidden": hidden, "ok": False, "outputs": [],
                                  "error": f"{d.code}: {d.message}"})
            continue
        env: dict[str, Any] = {n: a.astype(np.float64) if a.dtype.kind == "f" else a
                               for n, a in pristine.items()}
        env.update(dims)
        env.update(ref.param_dict)
        env.update(scalars)
        want = evaluate_reference(ref.reference, env)
        res = []
        for o in ref.outputs:
            if o not in got:
                res.append({"name": o, "ok": False, "error": "output not returned"})
                continue
            res.append(_describe_check(compare(o, np.asarray(got[o]), want[o], ref.tensor(o).dtype)))
        out["checks"].append({"dims": dims, "hidden": hidden, "ok": all(r["ok"] for r in res), "outputs": res,
                              "error": ""})
        if not out["checks"][-1]["ok"]:
            return out  # no point timing a wrong kernel
    for j, dims in enumerate(times):
        t = backend.time(compiled, dims, seed=seed + 7919 * (j + 1), reps=reps, input_sets=input_sets)
        out["timings"].append({"dims": dims, "samples": list(t.samples_s), "energy_j": t.energy_j,
                               "estimate": t.estimate, "details": t.details})
    return out


class Referee:
    def __init__(self, backend: Backend, start: Candidate, config: RefereeConfig):
        from argus.agent.gate import build

        self.backend = backend
        self.start = start
        self.config = config
        self.ref_kernel = build(start)

    @property
    def estimate(self) -> bool:
        return bool(self.backend.estimate)

    def work(self, dims: Shape) -> tuple[float, float, float]:
        """(useful FLOPs, minimum bytes, floor seconds) of the problem at dims."""
        fl, by = useful_flops(self.ref_kernel, dims), min_bytes(self.ref_kernel, dims)
        return fl, by, floor_seconds(fl, by, self.config.machine)

    def shapes_for(self, seed: int) -> list[tuple[Shape, bool]]:
        rng = np.random.default_rng([seed, 0x5EED])
        hidden = hidden_shapes(list(self.config.check_shapes), rng, self.config.hidden, self.config.fixed_dims)
        return [(dict(s), False) for s in self.config.check_shapes] + [(s, True) for s in hidden]

    def evaluate(self, c: Candidate, seed: int) -> Evaluation:
        cfg = self.config
        t0 = time.perf_counter()
        checks = self.shapes_for(seed)
        r = run_isolated(trial, self.backend, c.source, c.defines, c.kernel, self.start.source, self.start.defines,
                         self.start.kernel, checks, [dict(s) for s in cfg.time_shapes], seed, cfg.reps,
                         cfg.input_sets, timeout_s=cfg.timeout_s, start_method=self.backend.start_method)
        est = self.estimate
        dt = lambda: time.perf_counter() - t0  # noqa: E731
        if r.status == "timeout":
            return Evaluation("timeout", f"the candidate {r.describe()}", estimate=est, seconds=dt())
        if r.status == "fault":
            return Evaluation("fault", f"the candidate crashed: {r.describe()}", estimate=est, seconds=dt())
        if r.status == "error":
            return Evaluation("error", r.error.splitlines()[0] if r.error else "error", estimate=est, seconds=dt())
        v = r.value
        if v["stage"] == "compile":
            return Evaluation("compile-error", v["error"], v.get("report", {}), estimate=est, seconds=dt())
        sc = tuple(ShapeCheck(d["dims"], d["hidden"], d["ok"], tuple(d["outputs"]), d["error"]) for d in v["checks"])
        bad = [s for s in sc if not s.ok]
        if bad:
            s = bad[0]
            where = "an unseen irregular shape" if s.hidden else ",".join(f"{k}={x}" for k, x in s.dims.items())
            why = s.error or "; ".join(_wrong_text(o) for o in s.outputs if not o.get("ok"))
            return Evaluation("wrong", f"wrong result at {where}: {why}", v["report"], sc, estimate=est, seconds=dt())
        timings = []
        for tm in v["timings"]:
            samples = [float(x) for x in tm["samples"]]
            med = float(np.median(samples))
            fl, _, floor = self.work(tm["dims"])
            if not math.isfinite(med) or med <= 0 or med < floor:
                return Evaluation("rejected", f"measured {med * 1e6:.2f} us at "
                                  f"{'x'.join(map(str, tm['dims'].values()))} is below the speed-of-light floor "
                                  f"{floor * 1e6:.2f} us: a measurement error, not a result", v["report"], sc,
                                  estimate=est, seconds=dt())
            n = int((tm.get("details") or {}).get("samples", len(samples)))
            timings.append(ShapeTiming(tm["dims"], med, n, fl / med / 1e12 if fl else 0.0, floor,
                                       bool(tm["estimate"]), tm.get("energy_j"),
                                       float(np.percentile(samples, 10)), float(np.percentile(samples, 90)),
                                       tm.get("details") or {}))
        return Evaluation("ok", "", v["report"], sc, tuple(timings), est, dt())


def _wrong_text(o: dict[str, Any]) -> str:
    if o.get("error"):
        return f"{o['name']}: {o['error']}"
    s = f"{o['name']}: relative error {o['rel_error']:.2e} (tolerance {o['tolerance']:.0e}), {o['wrong']} wrong"
    if o.get("unwritten"):
        s += f", {o['unwritten']} unwritten (still poison)"
    return s
