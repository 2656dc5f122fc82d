"""`argus tune`: the command-line front of the tune loop (wired into argus/cli.py)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

from argus.cliargs import nonnegative, seconds, size
from argus.escape import terminal
from argus.limits import DEFAULT_MEMORY, format_bytes

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2


def add_tune_parser(sub, parse_define: Callable[[str], tuple[str, object]]) -> argparse.ArgumentParser:
    t = sub.add_parser(
        "tune", help="optimise a kernel: planner proposes, verifier checks, referee times, reward = log speedup",
        description="Start from FILE (with -D params) and, for --budget steps, let a planner propose a change "
        "(a param or a structural rewrite), verify it (repairing violations a bounded number of times), evaluate "
        "it (correctness at small and unseen irregular shapes, time at the target shapes) and record the step. "
        "Without a GPU runtime the times come from an analytic cost model and are marked as estimates. Writes "
        "OUT/record.jsonl, OUT/<kernel>_tuned.arg, OUT/report.md and OUT/reward.png. Every step also goes to the "
        "learning store (--store), which later runs read.",
        epilog="Exit status: 0 done, 1 a run error (kernel does not check, planner unavailable), 2 bad command line.")
    t.add_argument("file", help="an Argus source file (.arg), or a Python file (.py) of @argus.kernel definitions "
                   "(imported: its module-level code runs)")
    t.add_argument("-D", dest="define", action="append", type=parse_define, metavar="NAME=VALUE",
                   help="starting param value (repeatable), e.g. -D BM=64; giving every runtime dim (-D M=...) "
                   "makes that the target shape")
    t.add_argument("--kernel", help="which kernel of the file, or a layer's name; default (and for a layer): the "
                   "kernel with the most matrix-product work, named on the first line of output")
    t.add_argument("--budget", type=nonnegative, default=48, help="number of proposals to evaluate (default 48)")
    t.add_argument("--time-limit", type=seconds, metavar="SECONDS", help="stop before a step that would end past "
                   "this many seconds of the run (judged by the steps so far); the best so far is kept")
    t.add_argument("--planner", choices=("builtin", "anthropic"), default="builtin",
                   help="builtin: offline tree search over the knowledge base (default); anthropic: a Claude "
                   "model through the anthropic SDK (needs ANTHROPIC_API_KEY)")
    t.add_argument("--model", help="model for --planner anthropic (default: $ARGUS_ANTHROPIC_MODEL or "
                   "claude-sonnet-4-5)")
    t.add_argument("--seed", type=nonnegative, default=0, help="seed for the planner and the referee's inputs")
    t.add_argument("--shapes", help="target shapes, ';'-separated: 'M,N,K;...' in the kernel's dim order or "
                   "'M=4096,N=4096,K=4096;...'. The sizes are the kernel's dims, or for a kernel over routing "
                   "metadata (argus.moe) the routing's T,E,KTOP,HID,F. Default: GEMM 4096^3 and 8192^3; otherwise "
                   "the tiled dims 4096 and the counting dims (batch, heads) 8, as the kernel's assumes allow; MoE "
                   "T=2048,E=8,KTOP=2,HID=2048,F=2048")
    t.add_argument("--check-shapes", help="planner-visible small correctness shapes (same syntax; default: two "
                   "solved from the kernel's assumes, one tile-aligned and one irregular, counting dims 2-3)")
    t.add_argument("--out", help="output folder (default: tune-<file stem>)")
    t.add_argument("--resume", action="store_true", help="continue the run recorded in --out after a kill")
    t.add_argument("--evaluator", choices=("auto", "model", "gpu"), default="auto",
                   help="gpu: NVRTC + CUDA timing; model: interpreter + cost model (estimates); auto: gpu when the "
                   "GPU runtime is available")
    t.add_argument("--verifier", choices=("auto", "analysis", "interp"), default="auto",
                   help="auto: the static verifier when installed, then the interpreter at small shapes")
    t.add_argument("--max-repairs", type=nonnegative, default=2, help="repair attempts per step after a rejection")
    t.add_argument("--timeout", type=seconds, default=120.0,
                   help="seconds one evaluation (and one gate interpreter run) may take, in a child process")
    t.add_argument("--verify-timeout", type=seconds, default=30.0,
                   help="seconds the static verifier may take per candidate; past it the verdict is unknown")
    t.add_argument("--store", metavar="PATH", help="the learning store: every step's change, effect and verdict is "
                   "added to it, and earlier runs' entries order the built-in planner's search and give the "
                   "anthropic planner contrastive pairs (default: $ARGUS_TUNE_STORE or "
                   "~/.cache/argus/tune-store.json)")
    t.add_argument("--no-store", action="store_true", help="neither read nor update the learning store")
    t.add_argument("--memory-limit", type=size, default=DEFAULT_MEMORY, metavar="SIZE",
                   help=f"memory budget of each verifier, interpreter and CPU evaluation child (default "
                   f"{format_bytes(DEFAULT_MEMORY)}; the GPU evaluator's child is bounded by --timeout only)")
    return t


def choose_kernel(sf, name: str | None, defines: dict[str, object]) -> tuple[str | None, str]:
    """The kernel to tune: the named one; for a layer's name or no name in a file of several kernels, the
    one with the most matrix-product work (argus.agent.family.default_kernel), with a note saying so."""
    from argus.agent.family import default_kernel

    layer = next((g for g in sf.layers if g.name == name), None)
    if name is not None and layer is None:
        return name, ""
    if len(sf.kernels) == 1 and layer is None:
        return sf.kernels[0].name, ""
    built = [e.build({n: v for n, v in defines.items() if n in own_params(e)}) for e in sf.kernels]
    best, note = default_kernel(built)
    if layer is not None:
        note = (f"'{name}' is a layer (a composition of the file's kernels); "
                + note.replace("tuning kernel", "tuning its kernel", 1))
    return best.name, note


def own_params(entry) -> set[str]:
    from argus.dsl import ast

    return {s.name for s in entry.node.body if isinstance(s, ast.Param)}


def kernel_text(sf, entry) -> str:
    """One kernel of a file of several: its own lines (header to the end of its reference block) with
    the lines above it blank, so rewrites touch only this kernel and diagnostics keep the file's line
    numbers."""
    starts = sorted(n.span.line for n in (*(e.node for e in sf.kernels), *sf.layers))
    first = entry.node.span.line
    later = [x for x in starts if x > first]
    lines = entry.text.splitlines()
    own = lines[first - 1: (later[0] - 1 if later else len(lines))]
    while own and (not own[-1].strip() or own[-1].lstrip().startswith("#")):
        own.pop()
    return "\n" * (first - 1) + "\n".join(own) + "\n"


def cmd_tune(args) -> int:
    from argus.agent.loop import TuneConfig, TuneError, Tuner
    from argus.agent.planners import PlannerError
    from argus.agent.problem import ProblemError, problem_for
    from argus.agent.record import RecordError
    from argus.agent.shapes import parse_shapes
    from argus.agent.source import declared_params
    from argus.agent.store import default_path
    from argus.ir.build import build_source
    from argus.sources import load_source

    path = Path(args.file)
    if not path.is_file():
        print(f"argus tune: no such file: {terminal(args.file)}", file=sys.stderr)
        return EXIT_USAGE
    # A .py file: the tuner rewrites the chosen kernel's Argus text (its lines of the .py), starting from the
    # params its decorator binds; diagnostics keep the .py's line numbers. A .arg file is read through
    # argus.files (a regular file, UTF-8, below the size limit). --budget >= 0 is checked by its type.
    sf = load_source(path)
    defines = dict(args.define or [])
    name, note = choose_kernel(sf, args.kernel, defines)
    entry = sf.select(name)
    source = entry.text
    if not str(path).endswith(".py") and len(sf.kernels) + len(sf.layers) > 1:
        source = kernel_text(sf, entry)
    declared = declared_params(source)
    params = {**entry.params, **{k: v for k, v in defines.items() if k in declared}}
    k = build_source(source, params, name, path=str(path))  # errors go to the CLI's diagnostics
    try:
        names = problem_for(k).space(k).names
    except ProblemError as e:
        print(f"argus tune: {terminal(str(e))}", file=sys.stderr)
        return EXIT_ERROR
    dims_given = {d: int(defines[d]) for d in names if d in defines}
    unknown = [n for n in defines if n not in declared and n not in k.dims and n not in names]
    if unknown:
        print(f"argus tune: -D {unknown[0]}: kernel '{k.name}' has no param or problem size of that name "
              f"(params: {', '.join(declared)}; problem sizes: {', '.join(names)})", file=sys.stderr)
        return EXIT_USAGE
    try:
        targets = parse_shapes(args.shapes, tuple(names)) if args.shapes else None
        checks = parse_shapes(args.check_shapes, tuple(names)) if args.check_shapes else None
    except ValueError as e:
        print(f"argus tune: {terminal(str(e))}", file=sys.stderr)
        return EXIT_USAGE
    if targets is None and dims_given:
        if len(dims_given) != len(names):
            print(f"argus tune: give every problem size ({', '.join(names)}) with -D, or use --shapes",
                  file=sys.stderr)
            return EXIT_USAGE
        targets = [dims_given]
    if note:
        print(terminal(note), flush=True)
    out = args.out or f"tune-{path.stem}"
    if os.path.lexists(out) and not os.path.isdir(out):
        print(f"argus tune: --out {terminal(out)} exists and is not a folder", file=sys.stderr)
        return EXIT_USAGE
    cfg = TuneConfig(file=str(path), out_dir=out, budget=args.budget, planner=args.planner, model=args.model,
                     seed=args.seed, params=params, kernel=name,
                     targets=tuple(targets) if targets else None, checks=tuple(checks) if checks else None,
                     resume=args.resume, evaluator=args.evaluator, verifier=args.verifier,
                     max_repairs=args.max_repairs, timeout_s=args.timeout, verify_timeout_s=args.verify_timeout,
                     memory_bytes=args.memory_limit, source=source,
                     store=None if args.no_store else (args.store or str(default_path())),
                     time_limit_s=args.time_limit)

    def progress(line: str) -> None:
        print(terminal(line), flush=True)  # lines quote model replies: no escape sequences reach the terminal

    try:
        tuner = Tuner(cfg, progress=progress)
        res = tuner.run()
    except (TuneError, PlannerError, RecordError) as e:
        print(f"argus tune: {terminal(str(e))}", file=sys.stderr)
        if isinstance(e, PlannerError) and Path(out, "record.jsonl").exists():
            print(f"argus tune: the run so far is kept in {out}/record.jsonl; rerun with --resume", file=sys.stderr)
        return EXIT_ERROR
    est = " (estimates: CPU cost model)" if tuner.backend.estimate else ""
    proof = "" if res.best_proved else " (unproved: the verifier's verdict is unknown; tested, not proved)"
    print(f"best: step {res.best_step}, reward {res.best_reward:+.3f}{est}{proof}")
    print(f"wrote {res.best_path}, {res.report}, {res.plot}, {res.record}")
    if res.stopped:
        print(f"stopped early: {terminal(res.stopped)}")
    return EXIT_OK
