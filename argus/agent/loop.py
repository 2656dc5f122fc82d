"""The tune loop: propose -> verify (repair) -> compile/evaluate -> reward -> record, for a budget of steps.

Step 0 evaluates the starting kernel (the reward's reference). Each later step asks the planner for a
proposal; an edit that does not apply, a program that fails the gate (front end, interface, verifier,
small-shape interpreter) or does not compile goes back to the planner with the reason for a bounded
number of repairs; a candidate that passes is evaluated by the referee. The reward is the mean over
the target shapes of log(start time / candidate time); failures get no reward. Every step is appended
to the run record before the next begins, so `resume` continues exactly where a killed run stopped.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from argus.agent import gate
from argus.agent import kb as kbmod
from argus.agent.advice import diagnose
from argus.agent.backend import Backend, InterpBackend, RuntimeBackend
from argus.agent.family import family, kb_kind
from argus.agent.planners import Attempt, Node, Planner, PlannerContext, Proposal, make_planner
from argus.agent.planners.builtin import PlannerExhausted
from argus.agent.problem import ProblemError, problem_for
from argus.agent.program import Candidate, EditError, apply_edits, with_source
from argus.agent.record import RunRecord
from argus.agent.referee import Evaluation, Referee, RefereeConfig
from argus.agent.rewrites import Env
from argus.agent.shapes import default_targets, label
from argus.agent.store import Store, StoreError, contrastive, run_entries, signature
from argus.escape import terminal
from argus.limits import DEFAULT_MEMORY


class TuneError(RuntimeError):
    pass


@dataclass(frozen=True)
class TuneConfig:
    file: str
    out_dir: str
    budget: int = 48
    planner: str = "builtin"
    model: str | None = None
    seed: int = 0
    params: dict[str, object] = field(default_factory=dict)  # starting overrides (-D)
    kernel: str | None = None
    targets: tuple[dict[str, int], ...] | None = None
    checks: tuple[dict[str, int], ...] | None = None
    resume: bool = False
    evaluator: str = "auto"  # "auto" | "model" | "gpu"
    verifier: str = "auto"  # "auto" | "analysis" | "interp"
    max_repairs: int = 2
    timeout_s: float = 120.0  # one evaluation (child process)
    verify_timeout_s: float = 30.0  # one static-verifier run; past it the outcome is "unknown"
    hidden_shapes: int = 2
    scale_shapes: int = 2  # hidden shapes up to the targets' scale per evaluation
    memory_bytes: int | None = DEFAULT_MEMORY  # each verifier / interpreter / CPU evaluation child
    source: str | None = None  # the program text (default: read from file)
    store: str | None = None  # the learning store (argus/agent/store.py); None: runs learn nothing across
    time_limit_s: float | None = None  # wall-clock budget of the run: no step starts that would not finish


@dataclass(frozen=True)
class TuneResult:
    out_dir: Path
    steps: int
    best_step: int
    best_reward: float
    best: Candidate
    record: Path
    best_path: Path
    report: Path
    plot: Path
    stopped: str = ""  # why the loop ended before the budget (empty: it did not)
    best_proved: bool = False  # the verifier proved the best kernel (else: tested, not proved)


def pick_backend(name: str) -> Backend:
    if name == "model":
        return InterpBackend()
    why = RuntimeBackend.available()
    if name == "gpu":
        if why:
            raise TuneError(f"--evaluator gpu: {why}; use --evaluator model on a machine without the GPU runtime")
        return RuntimeBackend()
    return InterpBackend() if why else RuntimeBackend()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class Tuner:
    def __init__(self, cfg: TuneConfig, planner: Planner | None = None, backend: Backend | None = None,
                 progress: Callable[[str], None] | None = None,
                 on_step: Callable[[dict[str, Any]], None] | None = None):
        self.cfg = cfg
        self._run_t0: float | None = None  # when run() started: the time limit's clock
        self.progress = progress or (lambda s: None)
        self.on_step = on_step
        src = cfg.source if cfg.source is not None else Path(cfg.file).read_text()
        self.start = Candidate.make(src, dict(cfg.params), cfg.kernel)
        self.start_ir = gate.build(self.start)  # an ArgusError here is the user's kernel: let it through
        self.iface = gate.interface_of(self.start_ir, src)
        self.family = family(self.start_ir)
        self.kind = kb_kind(self.family)
        self.kb = kbmod.load()
        try:
            self.inputs = problem_for(self.start_ir)
            self.space = self.inputs.space(self.start_ir)
            self.targets = [dict(s) for s in (cfg.targets or default_targets(self.space, self.inputs))]
            self.checks = [dict(s) for s in (cfg.checks or self.space.checks())]
        except ProblemError as e:
            raise TuneError(str(e)) from None
        self._admissible(self.targets, "target")
        self._admissible(self.checks, "check")
        self.backend = backend or pick_backend(cfg.evaluator)
        self.planner = planner or make_planner(cfg.planner, model=cfg.model)
        self.env = Env(path=cfg.file, kernel=cfg.kernel)
        self.out = Path(cfg.out_dir)
        self.record_path = self.out / "record.jsonl"
        header = {
            "file": cfg.file, "kernel": self.start_ir.name, "start": self.start.to_json(),
            "start_key": self.start.key, "planner": self.planner.name,
            "model": getattr(self.planner, "model", None), "seed": cfg.seed, "budget": cfg.budget,
            "targets": self.targets, "checks": self.checks, "evaluator": self.backend.name,
            "estimate": bool(self.backend.estimate), "verifier": cfg.verifier, "kb_version": self.kb.version,
            "workload": self.kind, "family": self.family, "inputs": self.inputs.name,
            "shape_names": list(self.space.names), "created": _now(),
        }
        if cfg.resume:
            self.record = RunRecord.resume(self.record_path, header)
            fixed = self.record.header.get("fixed_dims", [])
            fixed = frozenset(d for d in fixed if isinstance(d, str)) if isinstance(fixed, list) else frozenset()
        else:
            fixed = self.space.fixed()
            header["fixed_dims"] = sorted(fixed)
            self.record = RunRecord.create(self.record_path, header)
        self.run_id = f"{self.record_path.resolve()}@{self.record.header.get('created', '')}"
        self.store = Store(cfg.store) if cfg.store else None
        try:
            self._finish_init(cfg, fixed)
        except BaseException:
            self.record.close()
            raise

    def _finish_init(self, cfg: TuneConfig, fixed: frozenset[str]) -> None:
        self.referee = Referee(self.backend, self.start, RefereeConfig(
            tuple(self.checks), tuple(self.targets), cfg.hidden_shapes, fixed, cfg.timeout_s,
            scale=cfg.scale_shapes, memory_bytes=cfg.memory_bytes, inputs=self.inputs, space=self.space))
        self.priors, self.lessons = None, ()
        if self.store is not None:
            try:
                entries = self.store.load()
            except StoreError as e:
                self.progress(f"note: {e}; this run learns nothing from earlier ones")
                entries = []
            from argus.agent.store import Priors

            self.priors = Priors(entries, self.family, exclude_run=self.run_id)
            sig = signature(self.start_ir, self.targets[0], self.family)
            self.lessons = tuple(contrastive(entries, self.family, sig, exclude_run=self.run_id))
        self.library = {}
        for s in self.targets:
            lib = kbmod.library_tflops(self.kind, s)
            if lib:
                self.library[tuple(s.values())] = lib

    # ---- helpers ----
    def _admissible(self, shapes: list[dict[str, int]], what: str) -> None:
        """Every given shape satisfies the starting kernel's own assumes (else: which one it breaks)."""
        from argus.agent.assumes import broken_assumes

        for s in shapes:
            missing = [n for n in self.space.names if n not in s]
            if missing:
                raise TuneError(f"{what} shape {label(s)}: give the problem sizes {', '.join(self.space.names)}")
            try:
                dims = self.inputs.dims(self.start_ir, s)
            except (ValueError, KeyError) as e:
                raise TuneError(f"{what} shape {label(s)}: {e}") from None
            broken = broken_assumes(self.start_ir, dims)
            if broken:
                b = broken[0]
                where = f"{self.cfg.file}:{b.line}: " if b.line else ""
                raise TuneError(f"{where}{what} shape {label(s)}: the starting kernel's assume({b.text}) does not "
                                "hold there; choose shapes it accepts")

    def _gate(self, c: Candidate, seed: int):
        return gate.check(c, self.iface, self.checks, seed=seed, verifier=self.cfg.verifier,
                          analysis_timeout_s=self.cfg.verify_timeout_s, interp_timeout_s=self.cfg.timeout_s,
                          memory_bytes=self.cfg.memory_bytes, inputs=self.inputs)

    def history(self) -> tuple[Node, ...]:
        return tuple(Node.from_record(d) for d in self.record.steps)

    def expected_budget(self, step: int) -> int:
        """The evaluations this run will get: the budget, or fewer where the time limit ends it first (at the
        steps' mean duration so far). Planners pace themselves by it (the built-in planner refines its best
        program in the second half)."""
        if self.cfg.time_limit_s is None or self._run_t0 is None or step <= 1:
            return self.cfg.budget
        done = [s.get("seconds") or 0.0 for s in self.record.steps[1:]]
        if not done or sum(done) <= 0:
            return self.cfg.budget
        left = self.cfg.time_limit_s - (time.monotonic() - self._run_t0)
        return max(step, min(self.cfg.budget, step - 1 + int(left / (sum(done) / len(done)))))

    def context(self, step: int) -> PlannerContext:
        lib = ""
        if self.library:
            vals = "/".join(f"{v[0]:.0f}" for v in self.library.values())
            lib = f"{next(iter(self.library.values()))[1].split(' on ')[0]} {vals} TFLOP/s (recorded)"
        return PlannerContext(step, self.expected_budget(step), self.cfg.seed, self.history(), self.kb, self.kind,
                              self.env, tuple(self.checks), tuple(self.targets), bool(self.backend.estimate), lib,
                              self.priors, self.lessons)

    def _start_times(self) -> list[float]:
        ev = self.record.steps[0]["evaluation"]
        return [t["median_s"] for t in ev["timings"]]

    def _library_ratio(self, ev: Evaluation) -> float | None:
        """Geometric mean over targets of library time / our time: measured in the same process when the
        backend timed the baseline, else from the recorded table (then an estimate in CPU mode)."""
        ratios = []
        for t in ev.timings:
            base = (t.details or {}).get("baseline_s")
            if base:
                ratios.append(base / t.median_s)
                continue
            lib = self.library.get(tuple(t.dims.values()))
            if lib:
                ratios.append(t.tflops / lib[0])
        return math.exp(sum(math.log(r) for r in ratios) / len(ratios)) if ratios else None

    def _reward(self, ev: Evaluation) -> tuple[float, list[float], float | None]:
        base = self._start_times()
        sp = [b / t.median_s for b, t in zip(base, ev.timings)]
        reward = sum(math.log(x) for x in sp) / len(sp)
        return reward, sp, self._library_ratio(ev)

    def _resolve(self, p: Proposal, ctx: PlannerContext) -> tuple[Candidate, Node]:
        parent = ctx.node(p.parent) if p.parent else None
        parent = parent or ctx.best
        if p.meta.get("parse_error"):
            raise EditError(f"could not read the reply: {p.meta['parse_error']}")
        if p.source is not None:
            return with_source(parent.candidate, p.source), parent
        if not p.edits:
            raise EditError("the proposal holds no edits and no program")
        return apply_edits(parent.candidate, p.edits, self.env), parent

    # ---- one step ----
    def _evaluate_start(self) -> dict[str, Any]:
        t0 = time.perf_counter()
        outcome, k = self._gate(self.start, self.cfg.seed)
        if outcome.violated:
            raise TuneError("the starting kernel fails its checks:\n" + outcome.describe())
        ev = self.referee.evaluate(self.start, seed=self.cfg.seed)
        if not ev.ok:
            raise TuneError(f"the starting kernel does not evaluate: {ev.status}: {ev.message}")
        diag = [d.to_json() for d in diagnose(self.start_ir, ev, self.kb, self.kind)]
        lib = self._library_ratio(ev)
        return {"step": 0, "time": _now(), "parent": None, "key": self.start.key,
                "proposal": Proposal(reasoning="the starting kernel", action="start").to_json(), "attempts": [],
                "candidate": self.start.to_json(), "verify": outcome.to_json(), "compile": ev.compile,
                "evaluation": ev.to_json(), "status": "ok", "reward": 0.0, "speedups": [1.0] * len(ev.timings),
                "library_ratio": lib, "tflops": [t.tflops for t in ev.timings],
                "tbps": [t.tbps for t in ev.timings], "best_step": 0,
                "best_reward": 0.0, "diagnosis": diag, "estimate": ev.estimate,
                "planner": {"name": "start", "reasoning": ""}, "signature": self._signature(self.start_ir), "diff": "",
                "seconds": round(time.perf_counter() - t0, 3)}

    def run_step(self, step: int) -> dict[str, Any]:
        t0 = time.perf_counter()
        ctx = self.context(step)
        seen = {n.key: n for n in ctx.history if n.key}
        attempts: list[Attempt] = []
        proposal = self.planner.propose(ctx)
        cand = parent = outcome = ev = k = None
        status = "invalid"
        for i in range(self.cfg.max_repairs + 1):
            problem, message = None, ""
            try:
                cand, parent = self._resolve(proposal, ctx)
            except (EditError, ValueError) as e:
                cand, problem, message = None, "invalid", str(e)
            if cand is not None:
                if cand.key in seen:
                    problem = "duplicate"
                    message = f"this program was already evaluated at step {seen[cand.key].step}"
                else:
                    outcome, k = self._gate(cand, self.cfg.seed + step)
                    if outcome.violated:
                        problem, message = "violated", f"verifier ({outcome.source}): {outcome.details()}"
                    else:
                        ev = self.referee.evaluate(cand, seed=self.cfg.seed * 1_000_003 + step)
                        if ev.status == "compile-error":
                            problem, message = "compile-error", ev.message
                        else:
                            status = ev.status
                            break
            status = problem
            attempts.append(Attempt(proposal, problem, message))
            if i == self.cfg.max_repairs:
                break
            nxt = self.planner.repair(ctx, attempts)
            if nxt is None:
                break
            proposal = nxt
        rec: dict[str, Any] = {
            "step": step, "time": _now(), "parent": parent.key if parent else proposal.parent,
            "key": cand.key if cand else None, "proposal": proposal.to_json(),
            "attempts": [a.to_json() for a in attempts],
            "candidate": cand.to_json() if cand else None, "verify": outcome.to_json() if outcome else None,
            "compile": ev.compile if ev else {}, "evaluation": ev.to_json() if ev else None,
            "status": status, "reward": None, "speedups": None, "library_ratio": None, "tflops": None,
            "diagnosis": [], "estimate": bool(self.backend.estimate),
            "planner": {"name": self.planner.name, "reasoning": proposal.reasoning},
            "tbps": None, "signature": {}, "diff": "",
        }
        if k is not None:
            rec["signature"] = self._signature(k)
        if cand is not None and parent is not None and parent.candidate is not None:
            from argus.agent.program import diff

            rec["diff"] = diff(parent.candidate, cand, context=1)[:800]
        if ev is not None and ev.ok:
            reward, sp, lib = self._reward(ev)
            rec.update(reward=reward, speedups=sp, library_ratio=lib, tflops=[t.tflops for t in ev.timings],
                       tbps=[t.tbps for t in ev.timings])
            rec["diagnosis"] = [d.to_json() for d in diagnose(k, ev, self.kb, self.kind)]
        best = pick_best([*self.record.steps, rec])
        rec["best_step"], rec["best_reward"] = best["step"], best["reward"]
        rec["seconds"] = round(time.perf_counter() - t0, 3)
        return rec

    def _signature(self, k) -> dict[str, Any]:
        return signature(k, self.inputs.dims(k, self.targets[0]), self.family)

    def _learn(self, rec: dict[str, Any]) -> None:
        """Add the step to the store (failures too); a store that cannot be written costs a note."""
        if self.store is None or rec["step"] == 0:
            return
        try:
            self.store.add(run_entries(self.run_id, self.record.header, self.record.steps)[-1:])
        except (StoreError, OSError) as e:
            self.progress(f"note: the tune store was not updated: {e}")
            self.store = None

    # ---- the run ----
    def line(self, rec: dict[str, Any]) -> str:
        b = self.cfg.budget
        n = rec["step"]
        width = 20
        filled = int(width * n / max(1, b))
        bar = "#" * filled + "." * (width - filled)
        est = " est." if rec.get("estimate") else ""
        best = self.record.steps[rec["best_step"]] if rec["best_step"] < len(self.record.steps) else rec
        sp = math.exp(rec["best_reward"])
        tf = "/".join(f"{x:.0f}" for x in (best.get("tflops") or []))
        unit = "TFLOP/s"
        if not any(best.get("tflops") or []) and best.get("tbps"):  # no matrix products: bandwidth
            tf, unit = "/".join(f"{x:.2f}" for x in best["tbps"]), "TB/s"
        lib = best.get("library_ratio")
        libtxt = f" = {lib:.2f}x library{est}" if lib else ""
        label = terminal(rec["proposal"].get("action") or "", keep_newlines=False)[:38]
        r = rec.get("reward")
        rtxt = f"{r:+.3f}" if r is not None else "  -   "
        status = rec["status"] + ("?" if rec["status"] == "ok" and not proved(rec) else "")
        unproved = "" if proved(best) else " unproved"
        return (f"[{bar}] step {n:>3}/{b} {status:<13} {label:<38} reward {rtxt} | best {sp:.2f}x "
                f"(step {rec['best_step']}{unproved}) {tf} {unit}{est}{libtxt}")

    def describe(self) -> str:
        """What the run does, printed before the (slow) first evaluation."""
        shapes = lambda xs: "; ".join(label(x) for x in xs)  # noqa: E731
        est = "the CPU cost model (estimates)" if self.backend.estimate else f"the {self.backend.name} backend"
        inputs = "a routing per shape (argus.moe)" if self.inputs.name == "routed" else "random data"
        return (f"tuning kernel '{self.start_ir.name}' of {self.cfg.file} ({self.family}; inputs: {inputs}); "
                f"correctness at {shapes(self.checks)} and unseen shapes; timed at {shapes(self.targets)} by "
                f"{est}; budget {self.cfg.budget}. Step 0 checks and times the starting kernel ...")

    def run(self) -> TuneResult:
        try:
            return self._run()
        finally:
            self.referee.close()  # the GPU evaluation child
            self.record.close()  # the lock goes with the run

    def _run(self) -> TuneResult:
        from argus.agent.report import write_outputs

        if not self.record.steps:
            self.progress(self.describe())
            rec = self._evaluate_start()
            self.record.append(rec)
            self.progress(self.line(rec))
            if self.on_step:
                self.on_step(rec)
        stopped = ""
        t0 = self._run_t0 = time.monotonic()
        for step in range(len(self.record.steps), self.cfg.budget + 1):
            if self.cfg.time_limit_s is not None:
                done = [s.get("seconds") or 0.0 for s in self.record.steps[1:]] or [self.record.steps[0].get("seconds")
                                                                                     or 0.0]
                if time.monotonic() - t0 + sum(done) / len(done) > self.cfg.time_limit_s:
                    stopped = (f"time limit: {self.cfg.time_limit_s:.0f} s would pass during step {step} "
                               f"(steps take {sum(done) / len(done):.0f} s)")
                    self.progress(stopped)
                    break
            try:
                rec = self.run_step(step)
            except PlannerExhausted as e:
                stopped = f"planner exhausted at step {step}: {e}"
                self.progress(stopped)
                break
            self.record.append(rec)
            self._learn(self.record.steps[-1])
            self.progress(self.line(rec))
            if self.on_step:
                self.on_step(rec)
        steps = self.record.steps
        best = pick_best(steps)
        paths = write_outputs(self.out, self.record.header, steps, best, self.start, self.kb)
        return TuneResult(self.out, len(steps), best["step"], best["reward"], Candidate.from_json(best["candidate"]),
                          self.record_path, paths["best"], paths["report"], paths["plot"], stopped, proved(best))


PROVED_MARGIN = math.log(1.02)  # a verified kernel within 2% of an unproved one is preferred to it


def proved(step: dict[str, Any]) -> bool:
    return ((step.get("verify") or {}).get("status")) == "verified"


def pick_best(steps: list[dict[str, Any]]) -> dict[str, Any]:
    """The fastest evaluated step, except that an unproved one (verifier verdict `unknown`) never wins
    while a verified step is within 2% of it (ties: the earlier step)."""
    scored = [s for s in steps if s.get("reward") is not None]
    best = max(scored, key=lambda s: (s["reward"], -s["step"]))
    if not proved(best):
        close = [s for s in scored if proved(s) and s["reward"] >= best["reward"] - PROVED_MARGIN]
        if close:
            best = max(close, key=lambda s: (s["reward"], -s["step"]))
    return best


def tune(cfg: TuneConfig, **kwargs) -> TuneResult:
    return Tuner(cfg, **kwargs).run()
