"""The referee: judges a candidate's correctness and speed without trusting the candidate.

For each evaluation, in a child process with a time and a memory limit (a hang or a crash costs one
step):
  * compile through the backend;
  * the candidate's assumes at every shape below: an assume that excludes a shape the starting
    kernel handles is a rejection with the assume's text (a candidate may not narrow the problem);
  * correctness at the planner-visible shapes, at fresh small irregular shapes and at fresh shapes up
    to the targets' scale (one or two dims large: large K, non-multiples, extremes), all drawn here and
    never shown to the planner, each within the starting kernel's own assumes: fresh random inputs,
    outputs poisoned with NaN before the run, the reference computed here in float64 from pristine
    copies of the inputs with the *starting* kernel's reference block, every output compared
    (unwritten elements stay NaN and fail);
  * correctness at every timed (target) shape before it is timed: on the GPU the whole kernel runs and
    its output is checked for poison everywhere and against float64 samples of the reference; on the
    CPU the interpreter runs sampled blocks (the first, the last along each grid axis, random ones),
    each must write output, and the elements they wrote are compared with float64 samples
    (argus.agent.sampling). The cost model refuses to time a shape that was not checked;
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

from argus.agent.backend import Backend, CompileFailed, release_gpu_cache, shape_key
from argus.agent.hardware import H200, Machine
from argus.agent.isolate import Worker, run_isolated
from argus.agent.problem import DenseInputs, Inputs, ShapeSpace
from argus.agent.program import Candidate
from argus.agent.shapes import Shape, hidden_shapes, scale_shapes
from argus.agent.workload import floor_seconds, min_bytes, useful_flops
from argus.limits import DEFAULT_MEMORY

STATUSES = ("ok", "compile-error", "wrong", "timeout", "fault", "rejected", "error")


KINDS = ("visible", "hidden", "scale", "timed")  # planner-visible, small unseen, unseen at scale, a target
MAX_REFERENCE_ELEMENTS = 1.5e8  # largest float64 array of an unseen shape's whole reference (1.2 GB)
MAX_REFERENCE_FLOPS = 5e10  # float64 work of it (tens of seconds at most)


@dataclass(frozen=True)
class ShapeCheck:
    dims: dict[str, int]
    hidden: bool
    ok: bool
    outputs: tuple[dict[str, Any], ...] = ()
    error: str = ""
    kind: str = "visible"
    verdict: str = ""  # why it failed: "wrong" | "assume" | "unchecked" (empty when ok)
    sample: dict[str, Any] = field(default_factory=dict)  # timed shapes: blocks run, elements compared

    def to_json(self) -> dict[str, Any]:
        return {"dims": self.dims, "hidden": self.hidden, "ok": self.ok, "outputs": list(self.outputs),
                "error": self.error, "kind": self.kind, "verdict": self.verdict, "sample": self.sample}

    @staticmethod
    def from_json(c: dict[str, Any]) -> ShapeCheck:
        return ShapeCheck(c["dims"], bool(c.get("hidden")), bool(c["ok"]), tuple(c.get("outputs", ())),
                          c.get("error", ""), c.get("kind", "hidden" if c.get("hidden") else "visible"),
                          c.get("verdict", ""), c.get("sample") or {})


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
    tbps: float = 0.0  # minimum bytes / median (TB/s): the figure for kernels without matrix products
    shape: dict[str, int] = field(default_factory=dict)  # the problem sizes (dims follow from them)

    def to_json(self) -> dict[str, Any]:
        return {"dims": self.dims, "median_s": self.median_s, "samples": self.samples, "tflops": self.tflops,
                "floor_s": self.floor_s, "estimate": self.estimate, "energy_j": self.energy_j,
                "p10_s": self.p10_s, "p90_s": self.p90_s, "details": self.details, "tbps": self.tbps,
                "shape": self.shape}


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
                          tuple(ShapeCheck.from_json(c) for c in d.get("checks", [])),
                          tuple(ShapeTiming(**t) for t in d.get("timings", [])), d.get("estimate", True),
                          d.get("seconds", 0.0))


@dataclass(frozen=True)
class RefereeConfig:
    check_shapes: tuple[Shape, ...]  # planner-visible correctness shapes
    time_shapes: tuple[Shape, ...]  # the targets
    hidden: int = 2  # unseen small irregular shapes per evaluation
    fixed_dims: frozenset[str] = frozenset()
    timeout_s: float = 120.0
    reps: int = 30
    input_sets: int = 4
    machine: Machine = H200
    scale: int = 2  # unseen shapes up to the targets' scale per evaluation
    sample_blocks: int = 3  # blocks interpreted at each timed shape (CPU)
    memory_bytes: int | None = DEFAULT_MEMORY  # of the child (not applied to a GPU backend's)
    inputs: Inputs = field(default_factory=DenseInputs)  # problem sizes -> a candidate's dims and inputs
    space: ShapeSpace | None = None  # the starting kernel's assumes over its sizes (drawn shapes obey them)


def _describe_check(c) -> dict[str, Any]:
    return {"name": c.name, "ok": c.ok, "rel_error": c.rel_error, "tolerance": c.tolerance, "wrong": c.bad,
            "unwritten": c.nonfinite, "first_wrong": list(c.first_bad) if c.first_bad else None}


def _label(dims: dict[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in dims.items())


def _refused(dims: dict[str, int], kind: str, broken) -> dict[str, Any]:
    what = "a target shape" if kind == "timed" else "a shape"
    return {"dims": dims, "hidden": kind in ("hidden", "scale"), "ok": False, "outputs": [], "kind": kind,
            "verdict": "assume", "error": f"{broken.describe(dims)}: its assume excludes {what} the starting kernel "
            "handles (a candidate may not narrow the problem)"}


def full_check(backend: Backend, compiled, ref, dims: dict[str, int], kind: str, rng,
               arrays: dict[str, np.ndarray] | None = None, shape: dict[str, int] | None = None) -> dict[str, Any]:
    """The whole kernel at `dims` against the whole float64 reference (`arrays`: the candidate's inputs
    from the run's input provider; default fresh random data)."""
    from argus.dsl.diagnostics import ArgusError
    from argus.dsl.reference import evaluate_reference
    from argus.interp.run import compare, make_arrays, reference_env, resolve_scalars, working_dtype

    if arrays is None:
        arrays = make_arrays(ref, dims, rng)  # fresh inputs; outputs poisoned (NaN / -1)
    scalars = resolve_scalars(ref, dims)
    env = reference_env(ref, arrays, dims, scalars)  # pristine float64 copies, taken before the run
    base = {"dims": dims, "hidden": kind in ("hidden", "scale"), "kind": kind, "outputs": []}
    if shape is not None and shape != dims:
        base["shape"] = shape
    try:
        got = backend.execute(compiled, arrays, dims, scalars)
    except ArgusError as e:
        d = e.diagnostics[0]
        return {**base, "ok": False, "error": f"{d.code}: {d.message}",
                "verdict": "assume" if d.code == "precondition" else "wrong"}
    want = evaluate_reference(ref.reference, env)
    res = []
    for o in ref.outputs:
        if o not in got:
            res.append({"name": o, "ok": False, "error": "output not returned"})
            continue
        # the tolerance of the trusted start's working type: a candidate cannot loosen it with a cast of its own
        res.append(_describe_check(compare(o, np.asarray(got[o]), want[o], working_dtype(ref, o))))
    ok = all(r["ok"] for r in res)
    return {**base, "ok": ok, "outputs": res, "error": "", "verdict": "" if ok else "wrong"}


def timed_check(backend: Backend, compiled, ref, cand, refs, dims: dict[str, int], probe: dict[str, int],
                rng, n_blocks: int, arrays: dict[str, np.ndarray] | None = None) -> dict[str, Any]:
    """Correctness at a target shape (see the module docstring): sampled blocks on the CPU, the whole
    kernel on the GPU; sampled output elements against the sliced float64 reference."""
    from argus.agent.sampling import big_inputs, choose_indices, compare_sample, sample_blocks
    from argus.dsl.diagnostics import ArgusError
    from argus.interp.machine import grid_size
    from argus.interp.run import resolve_scalars, working_dtype

    base = {"dims": dims, "hidden": False, "kind": "timed", "outputs": []}
    scalars = resolve_scalars(ref, dims)
    if arrays is None:
        arrays = big_inputs(ref, dims, rng)
    pristine = {n: (a.copy() if n in ref.inputs else np.broadcast_to(a.flat[0], a.shape)) for n, a in arrays.items()}
    info: dict[str, Any] = {}
    try:
        if getattr(backend, "partial", False):
            grid = grid_size(cand, dims, scalars)[:max(1, len(cand.grid))]
            blocks = sample_blocks(grid, rng, n_blocks)
            info["blocks"] = [list(b) for b in blocks]
            seen = 0
            for b in blocks:
                backend.execute(compiled, arrays, dims, scalars, blocks=[b])
                now = sum(int(np.count_nonzero(_written(arrays[o]))) for o in ref.outputs)
                if now == seen:
                    return {**base, "ok": False, "verdict": "wrong", "sample": info,
                            "error": f"block {tuple(b)} wrote no output element (its tiles are skipped)"}
                seen = now
            got = {o: arrays[o] for o in ref.outputs}
            written = {o: _written(got[o]) for o in ref.outputs}
        else:
            got = backend.execute(compiled, arrays, dims, scalars)
            written = None
    except ArgusError as e:
        d = e.diagnostics[0]
        return {**base, "ok": False, "error": f"{d.code}: {d.message}", "sample": info,
                "verdict": "assume" if d.code == "precondition" else "wrong"}
    compared = 0
    for o in ref.outputs:
        if o not in got:
            return {**base, "ok": False, "verdict": "wrong", "error": f"{o}: output not returned", "sample": info}
        out = np.asarray(got[o])
        names = refs.sliceable(o, probe, rng)
        axes = {d: [i for i, x in enumerate(ref.tensor(o).dims) if x == d] for d in names}
        live = written[o] if written is not None else None
        if live is None:
            cands = {d: np.concatenate([rng.integers(0, dims[d], 64), [0, dims[d] - 1]]) for d in names}
        else:
            cands = {d: np.nonzero(live.any(axis=tuple(i for i in range(out.ndim) if i != axes[d][0])))[0]
                     for d in names}
        select = choose_indices(cands, dims, refs, rng)
        if select is not None and live is None:  # the whole grid ran: poison left anywhere is sampled too
            bad = np.argwhere(~_written(out))[:4]
            select = {d: np.union1d(ix, bad[:, axes[d][0]]) for d, ix in select.items()}
        if select is None:
            return {**base, "ok": False, "verdict": "unchecked", "sample": info,
                    "error": f"{o}: the reference is too large to sample at this shape, so the referee cannot "
                    "check (and will not time) it; choose smaller target shapes"}
        res = compare_sample(out, refs.sample(pristine, dims, o, select), working_dtype(ref, o), live)
        compared += res["compared"]
        if res["wrong"]:
            idx, val, want = res["first_wrong"]
            return {**base, "ok": False, "verdict": "wrong", "sample": {**info, "compared": compared},
                    "error": f"{o}: {res['wrong']} of {res['compared']} sampled elements wrong, first "
                    f"{o}[{', '.join(map(str, idx))}] = {val:.6g} vs reference {want:.6g}"}
    info["compared"] = compared
    return {**base, "ok": True, "error": "", "verdict": "", "sample": info}


def _written(a: np.ndarray) -> np.ndarray:
    return np.isfinite(a) if a.dtype.kind == "f" else a != -1


def trial(backend: Backend, source: str, defines: dict, kernel: str | None, ref_source: str, ref_defines: dict,
          ref_kernel: str | None, checks: list[tuple[Shape, str]], times: list[Shape], seed: int, reps: int,
          input_sets: int, sample_blocks: int = 3, inputs: Inputs | None = None) -> dict[str, Any]:
    """Runs in the child process. Returns plain data only. `checks` and `times` are problem shapes; the
    candidate's dims and inputs at each come from `inputs` (the run's provider)."""
    from argus.agent.assumes import broken_assumes
    from argus.agent.gate import build_cached
    from argus.agent.sampling import SlicedReference
    from argus.dsl.diagnostics import ArgusError
    from argus.interp.run import resolve_scalars

    inputs = inputs or DenseInputs()
    ref = build_cached(ref_source, tuple(sorted(ref_defines.items())), ref_kernel)
    try:
        cand = build_cached(source, tuple(sorted(defines.items())), kernel)
        compiled = backend.compile(source, defines, kernel)
    except CompileFailed as e:
        return {"stage": "compile", "error": str(e), "report": e.report}
    except ArgusError as e:
        return {"stage": "compile", "error": "; ".join(d.message for d in e.diagnostics), "report": {}}
    out: dict[str, Any] = {"stage": "done", "report": compiled.report, "checks": [], "timings": []}
    probe = probe_arrays = None
    for i, (shape, kind) in enumerate(checks):
        rng = np.random.default_rng([seed, i])
        dims, arrays = inputs.arrays(cand, shape, rng)
        if probe is None:
            probe, probe_arrays = dims, {n: a.copy() for n, a in arrays.items()}
        broken = broken_assumes(cand, dims, resolve_scalars(ref, dims))
        out["checks"].append(_refused(dims, kind, broken[0]) if broken else
                             full_check(backend, compiled, ref, dims, kind, rng, arrays, shape))
        if not out["checks"][-1]["ok"]:
            return out  # no point timing a wrong kernel
    probe = probe or {d: 64 for d in ref.dims}
    refs = SlicedReference(ref, resolve_scalars(ref, probe), probe_arrays)  # scalar arguments: their defaults
    for j, shape in enumerate(times):
        rng = np.random.default_rng([seed, 7919, j])
        dims, arrays = inputs.arrays(cand, shape, rng, big=True, adversarial=False)
        broken = broken_assumes(cand, dims, resolve_scalars(ref, dims))
        out["checks"].append(_refused(dims, "timed", broken[0]) if broken else
                             timed_check(backend, compiled, ref, cand, refs, dims, probe, rng, sample_blocks,
                                         arrays))
        if not out["checks"][-1]["ok"]:
            return out  # never time a shape that is not checked
        at = {**shape, **dims}  # the problem sizes with the dims they give this candidate
        compiled.checked.add(shape_key(at))
        if inputs.name != "dense":
            compiled.arrays[shape_key(at)] = arrays  # data-dependent: time on the checked inputs
        t = backend.time(compiled, at, seed=seed + 7919 * (j + 1), reps=reps, input_sets=input_sets)
        out["timings"].append({"dims": dims, "shape": shape, "samples": list(t.samples_s), "energy_j": t.energy_j,
                               "estimate": t.estimate, "details": t.details})
    return out


class Referee:
    def __init__(self, backend: Backend, start: Candidate, config: RefereeConfig):
        from argus.agent.gate import build

        self.backend = backend
        self.start = start
        self.config = config
        self.ref_kernel = build(start)
        # GPU evaluations share one child (spawn, imports, CUDA context once per run; see isolate.Worker)
        self._worker = Worker(backend.start_method, release_gpu_cache) if backend.start_method == "spawn" else None

    def close(self) -> None:
        if self._worker is not None:
            self._worker.close()

    @property
    def estimate(self) -> bool:
        return bool(self.backend.estimate)

    def work(self, dims: Shape) -> tuple[float, float, float]:
        """(useful FLOPs, minimum bytes, floor seconds) of the problem at dims."""
        fl, by = useful_flops(self.ref_kernel, dims), min_bytes(self.ref_kernel, dims)
        return fl, by, floor_seconds(fl, by, self.config.machine)

    def _admissible(self, s: Shape) -> bool:
        """A shape the starting kernel itself accepts (its own assumes hold there), whose whole float64
        reference stays affordable (a routed MoE reference gathers an [M, HID, F] weight array)."""
        from argus.agent.assumes import broken_assumes
        from argus.agent.workload import reference_cost

        dims = self.config.inputs.dims(self.ref_kernel, s)
        flops, peak = reference_cost(self.ref_kernel, dims)
        return not broken_assumes(self.ref_kernel, dims) and peak <= MAX_REFERENCE_ELEMENTS and \
            flops <= MAX_REFERENCE_FLOPS

    def shapes_for(self, seed: int) -> list[tuple[Shape, str]]:
        cfg = self.config
        rng = np.random.default_rng([seed, 0x5EED])
        visible = list(cfg.check_shapes)
        out: list[tuple[Shape, str]] = [(dict(s), "visible") for s in visible]
        for kind, n in (("hidden", cfg.hidden), ("scale", cfg.scale)):
            for attempt in range(20):  # redraw shapes the starting kernel's own assumes exclude
                drawn = hidden_shapes(visible, rng, n, cfg.fixed_dims, space=cfg.space) if kind == "hidden" else \
                    scale_shapes(visible, list(cfg.time_shapes), rng, n, cfg.fixed_dims, space=cfg.space)
                keep = [s for s in drawn if self._admissible(s)]
                if len(keep) == len(drawn) or attempt == 19:
                    out.extend((s, kind) for s in keep)
                    break
        return out

    def evaluate(self, c: Candidate, seed: int) -> Evaluation:
        cfg = self.config
        t0 = time.perf_counter()
        checks = self.shapes_for(seed)
        gpu = self.backend.start_method != "fork"  # a CUDA context maps more address space than any cap
        args = (trial, self.backend, c.source, c.defines, c.kernel, self.start.source, self.start.defines,
                self.start.kernel, checks, [dict(s) for s in cfg.time_shapes], seed, cfg.reps, cfg.input_sets,
                cfg.sample_blocks, cfg.inputs)
        if self._worker is not None:
            r = self._worker.run(*args, timeout_s=cfg.timeout_s)
            if r.status == "ok" and not all(ch.get("ok") for ch in r.value.get("checks", ())):
                self._worker.close()  # a wrong kernel may have written outside its outputs: a fresh context next
        else:
            r = run_isolated(*args, timeout_s=cfg.timeout_s, start_method=self.backend.start_method,
                             memory_bytes=None if gpu else cfg.memory_bytes)
        est = self.estimate
        dt = lambda: time.perf_counter() - t0  # noqa: E731
        if r.status == "timeout":
            return Evaluation("timeout", f"the candidate {r.describe()}", estimate=est, seconds=dt())
        if r.status == "memory":
            return Evaluation("fault", f"the candidate's evaluation {r.describe()}", estimate=est, seconds=dt())
        if r.status == "fault":
            return Evaluation("fault", f"the candidate crashed: {r.describe()}", estimate=est, seconds=dt())
        if r.status == "error":
            return Evaluation("error", r.error.splitlines()[0] if r.error else "error", estimate=est, seconds=dt())
        v = r.value
        if v["stage"] == "compile":
            return Evaluation("compile-error", v["error"], v.get("report", {}), estimate=est, seconds=dt())
        sc = tuple(ShapeCheck.from_json(d) for d in v["checks"])
        bad = [s for s in sc if not s.ok]
        if bad:
            s = bad[0]
            where = {"hidden": "an unseen irregular shape", "scale": "an unseen shape at the targets' scale",
                     "timed": f"the target shape {_label(s.dims)}"}.get(s.kind, _label(s.dims))
            why = s.error or "; ".join(_wrong_text(o) for o in s.outputs if not o.get("ok"))
            if s.verdict == "assume":
                return Evaluation("rejected", f"at {where}: {why}", v["report"], sc, estimate=est, seconds=dt())
            if s.verdict == "unchecked":
                return Evaluation("error", f"at {where}: {why}", v["report"], sc, estimate=est, seconds=dt())
            return Evaluation("wrong", f"wrong result at {where}: {why}", v["report"], sc, estimate=est, seconds=dt())
        timings = []
        for tm in v["timings"]:
            samples = [float(x) for x in tm["samples"]]
            med = float(np.median(samples))
            fl, nbytes, floor = self.work(tm["dims"])
            if not math.isfinite(med) or med <= 0 or med < floor:
                return Evaluation("rejected", f"measured {med * 1e6:.2f} us at "
                                  f"{'x'.join(map(str, tm['dims'].values()))} is below the speed-of-light floor "
                                  f"{floor * 1e6:.2f} us: a measurement error, not a result", v["report"], sc,
                                  estimate=est, seconds=dt())
            n = int((tm.get("details") or {}).get("samples", len(samples)))
            timings.append(ShapeTiming(tm["dims"], med, n, fl / med / 1e12 if fl else 0.0, floor,
                                       bool(tm["estimate"]), tm.get("energy_j"),
                                       float(np.percentile(samples, 10)), float(np.percentile(samples, 90)),
                                       tm.get("details") or {}, nbytes / med / 1e12, tm.get("shape") or {}))
        return Evaluation("ok", "", v["report"], sc, tuple(timings), est, dt())


def _wrong_text(o: dict[str, Any]) -> str:
    if o.get("error"):
        return f"{o['name']}: {o['error']}"
    s = f"{o['name']}: relative error {o['rel_error']:.2e} (tolerance {o['tolerance']:.0e}), {o['wrong']} wrong"
    if o.get("unwritten"):
        s += f", {o['unwritten']} unwritten (still poison)"
    return s
