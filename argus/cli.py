"""The `argus` command line: check, build, run and tune kernels of a .arg or .py file."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import sys
import time

from argus.cliargs import add_limit_options, nonnegative, positive
from argus.dsl.diagnostics import ArgusError, Diagnostic, render_all
from argus.limits import DEFAULT_MEMORY, DEFAULT_TIME_S, Limits, format_bytes

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3


def parse_define(text: str) -> tuple[str, object]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"-D {text}: write NAME=VALUE, e.g. -D M=4096")
    name, value = text.split("=", 1)
    name = name.strip()
    if not name.isidentifier():
        raise argparse.ArgumentTypeError(f"-D {text}: '{name}' is not a name")
    return name, _value(value.strip())


MAX_DEFINE_CHARS = 200


def _value(v: str) -> object:
    if len(v) > MAX_DEFINE_CHARS:
        raise argparse.ArgumentTypeError(f"a -D value may be at most {MAX_DEFINE_CHARS} characters")
    if v in ("True", "true"):
        return True
    if v in ("False", "false"):
        return False
    digits = v.lstrip("+-")
    digits = digits[2:] if digits[:2].lower() in ("0x", "0o", "0b") else digits
    if digits.isdigit() and len(digits.lstrip("0")) > 20:
        raise argparse.ArgumentTypeError(f"{v[:24]}...: integers fit in 64 bits (at most 20 digits)")
    try:
        return int(v, 0)
    except ValueError:
        pass
    try:
        f = float(v)
    except ValueError:
        pass
    else:
        if not math.isfinite(f):
            raise argparse.ArgumentTypeError(f"{v}: not a finite number")
        return f
    if len(v) >= 2 and v[0] == v[-1] and v[0] in "\"'":
        return v[1:-1]
    return v


def _defines(args) -> dict[str, object]:
    return dict(args.define or [])


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="an Argus source file (.arg), or a Python file (.py) of @argus.kernel definitions "
                   "(imported: its module-level code runs)")
    p.add_argument("-D", dest="define", action="append", type=parse_define, metavar="NAME=VALUE",
                   help="set a compile-time parameter or a runtime dimension (repeatable), e.g. -D BM=64 -D M=4096")
    p.add_argument("--kernel", help="which kernel of the file (default: check and build take every kernel, run "
                   "the first)")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="output format; the JSON records are documented (and versioned) in docs/json.md")
    add_limit_options(p)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="argus",
        description="Argus: a tile-level GPU kernel language whose compiler proves data-flow invariants.",
        epilog="Exit status: 0 success, 1 errors in the kernel, a violated invariant, a wrong result or a limit "
               "reached, 2 unknown verdict (also: check past its time or memory limit) or bad command line, 3 internal "
               f"error. Every command but tune runs in a child process with a time limit (default {DEFAULT_TIME_S:.0f} "
               f"s) and a memory limit (default {format_bytes(DEFAULT_MEMORY)}): see --time-limit, --memory-limit.")
    p.add_argument("--version", action="version", version="argus 0.1.0")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    c = sub.add_parser("check", help="check a kernel and prove its invariants (tags, races, bounds, ...) with Z3",
                       description="Parse FILE, run the semantic checks, lower it to the IR (binding -D "
                       "parameters, expanding pipelines, assigning MMA layouts), then prove every data-flow "
                       "invariant and hazard check on the lowered program with Z3 (each output against its "
                       "reference: block's data flow). Violations come with a counterexample replayed in the "
                       "interpreter. Then the numeric tier runs the kernel in the interpreter against its "
                       "reference at two small shapes (tested, not proved). A construct the code generator "
                       "cannot build is refused at its line. Exit 0 verified, 1 errors, violations or a failed "
                       "test, 2 unknown (solver budget or unsupported construct; never reported as verified).")
    _common(c)
    c.add_argument("--emit-ir", action="store_true", help="print the lowered IR")
    c.add_argument("--no-verify", action="store_true", help="stop after the front end and lowering")
    c.add_argument("--no-replay", action="store_true", help="do not replay counterexamples in the interpreter")
    c.add_argument("--no-test", action="store_true",
                   help="skip the numeric tier (the interpreter against the reference at two small shapes)")
    c.add_argument("--timings", action="store_true", help="print each check's time")
    r = sub.add_parser("run", help="run a kernel (interpreter or GPU), compare with its reference: block, time it",
                       description="Draw fresh random inputs (outputs poisoned with NaN), execute the kernel, "
                       "evaluate its reference: block in float64 and compare. Exit 1 if any output is wrong. "
                       "Runtime dimensions must be given with -D.")
    _common(r)
    where = r.add_mutually_exclusive_group(required=True)
    where.add_argument("--interp", action="store_true", help="execute in the NumPy interpreter")
    where.add_argument("--gpu", action="store_true", help="compile with NVRTC and run on the GPU")
    where.add_argument("--bench", action="store_true",
                       help="run on the GPU, then time the kernel (CUDA events, median, L2-rotated inputs) and the "
                       "library baseline (cuBLAS for a GEMM reference) in the same process")
    r.add_argument("--iters", type=positive, default=30, help="timed launches per kernel with --bench (default 30)")
    r.add_argument("--arch", default=None, help="GPU architecture (default: the GPU's)")
    r.add_argument("--seed", type=nonnegative, default=None, help="random seed for the inputs (default: fresh)")
    b = sub.add_parser("build", help="generate CUDA C++, compile it with NVRTC, report registers/smem/spills",
                       description="Lower each kernel of FILE (or the one --kernel names) to the IR, generate "
                       "CUDA C++ (with #line directives to FILE), compile it with NVRTC to a cubin (disk-cached) and "
                       "print each kernel's registers, shared memory, stack frame and spills. --emit picks the "
                       "artefact written to -o (a folder when FILE holds several kernels).")
    _common(b)
    b.add_argument("--emit", choices=("cuda", "ptx", "cubin"), default="cubin", help="artefact to write")
    b.add_argument("--arch", default=None, help="target, e.g. sm_90a or sm_80 (default: the GPU's, else sm_90a)")
    b.add_argument("-o", "--output", default=None,
                   help="output path, or folder for several kernels (default: KERNEL.cu / .ptx / .cubin in the current "
                   "directory; - for stdout); never written through a symbolic link")
    b.add_argument("--force", action="store_true", help="replace an existing output file")
    from argus.agent.cli import add_tune_parser

    add_tune_parser(sub, parse_define)
    return p


EXIT_UNKNOWN = 2


def defines_for(node, defines: dict[str, object]) -> dict[str, object]:
    """In a file of several kernels, -D applies to the kernels (and layers) with that parameter or dim."""
    from argus.dsl import ast

    own = {s.name for s in node.body if isinstance(s, ast.Param)} | {a.name for a in node.args} | \
        {d for a in node.args if a.dims for d in a.dims if isinstance(d, str)}
    return {n: v for n, v in defines.items() if n in own}


def cmd_check(args) -> int:
    """One kernel (--kernel, or a file holding one); a file of several kernels checks each in turn:
    the exit status is the worst of theirs (violated > unknown > verified). The file is read and parsed
    once (argus.sources.load_source)."""
    from argus.records import file_record
    from argus.sources import load_source

    src = load_source(args.file)
    defines = _defines(args)

    def walk() -> tuple[int, dict]:
        if args.kernel is not None and any(g.name == args.kernel for g in src.layers):
            return _check_layer(args, next(g for g in src.layers if g.name == args.kernel), defines, src)
        if args.kernel is not None or (len(src.kernels) <= 1 and not src.layers):  # none: select's error
            return _check_one(args, src.select(args.kernel), defines)
        codes, recs = [], []
        items = [(k.node, lambda d, k=k: _check_one(args, k, d)) for k in src.kernels] + \
            [(g, lambda d, g=g: _check_layer(args, g, d, src)) for g in src.layers]
        for node, check in items:
            code, one = check(defines_for(node, defines))
            codes.append(code)
            recs.append(one)
        code = EXIT_ERROR if EXIT_ERROR in codes else EXIT_UNKNOWN if EXIT_UNKNOWN in codes else max(codes)
        status = {EXIT_OK: "ok" if args.no_verify else "verified", EXIT_ERROR: "violated"}.get(code, "unknown")
        return code, file_record(args.file, status, recs)

    if not args.no_verify:
        _verify_ahead(args, walk)
    code, rec = walk()
    if args.format == "json":
        print(json.dumps(rec, indent=2, default=str))
    return code


def _check_layer(args, layer, defines: dict[str, object], src) -> tuple[int, dict]:
    """A layer: its signature, params and reference block are checked; a layer that calls kernels
    (argus/layers.py) also has its calls checked, every called kernel verified with the params the call
    passes (and their specializations), and the kernels' references composed in its order tested against
    its reference at several dims (with every called kernel's assumes holding there)."""
    from argus.dsl import ast
    from argus.dsl.check import check_layer
    from argus.layers import call_params, check_composition, layer_params, plan_layer
    from argus.records import layer_record

    t0 = time.perf_counter()
    checked = check_layer(layer, defines)
    plan = plan_layer(layer, [k.node for k in src.kernels])
    dt = time.perf_counter() - t0
    if not plan.executable:
        if args.format == "text":
            print(f"{args.file}: layer '{layer.name}' ok ({dt * 1000:.0f} ms; its reference block is the float64 "
                  f"ground truth of {', '.join(checked.outputs)}, nothing to verify)")
        return EXIT_OK, layer_record(args.file, layer.name, checked.outputs, dt)
    explicit = {k: v for k, v in defines.items() if any(isinstance(s, ast.Param) and s.name == k for s in layer.body)}
    lp = layer_params(layer, explicit)
    codes, recs, seen = [], [], set()
    for call in plan.calls:
        cp = call_params(call, lp)
        key = (call.kernel.name, *sorted(cp.items()))
        if key in seen:
            continue
        seen.add(key)
        if args.format == "text":
            print(f"{args.file}: layer '{layer.name}' calls '{call.kernel.name}'"
                  + ("" if not cp else " with " + ", ".join(f"{k}={v!r}" for k, v in cp.items())))
        # a kernel and param set another layer (or route) of this command already verified is not verified
        # again: the split-K routes of gemm_ws.arg call splitk_reduce with the same params a dozen times
        done = args.__dict__.setdefault("_layer_calls_done", {})
        if key not in done:
            done[key] = _check_one(args, src.select(call.kernel.name), cp)
        elif args.format == "text":
            print(f"{args.file}: kernel '{call.kernel.name}': as checked above")
        code, rec = done[key]
        codes.append(code)
        recs.append(rec)
    if args.no_test or args.no_verify or getattr(args, "_collect", None) is not None:
        problems, tested = [], False
    else:
        problems, tested = check_composition(plan, explicit, dims=defines), True
    dt = time.perf_counter() - t0
    if problems:  # a composition that could not be tested is a warning: unknown, not violated
        codes.append(EXIT_ERROR if any(p.severity == "error" for p in problems) else EXIT_UNKNOWN)
    code = EXIT_ERROR if EXIT_ERROR in codes else EXIT_UNKNOWN if EXIT_UNKNOWN in codes else EXIT_OK
    status = {EXIT_OK: "ok" if args.no_verify else "verified", EXIT_ERROR: "violated"}.get(code, "unknown")
    if args.format == "text":
        what = ("composition tested against its reference" if tested else
                f"composition not tested ({'--no-verify' if args.no_verify else '--no-test'})")
        print(f"{args.file}: layer '{layer.name}': {status} ({len(plan.calls)} calls; {what}; {dt:.1f} s)")
        if problems:
            print(render_all(problems))
    rec = {**layer_record(args.file, layer.name, checked.outputs, dt), "status": status, "calls": recs,
           "composition": {"tested": tested, "problems": [p.to_json() for p in problems]}}
    return code, rec


def _check_one(args, src, defines: dict[str, object]) -> tuple[int, dict]:
    """Check one kernel (a argus.sources.KernelSource); text output is printed here, the JSON record
    returned. -D values override the params a .py decorator binds. The verification (argus.verification,
    as Kernel.verify) checks the dims, declines loops too long to walk and turns a RecursionError into
    unknown; this whole command runs in the bounded child (see _bounded)."""
    from argus.dsl import ast

    defines = src.defines(defines)
    params = {s.name for s in src.node.body if isinstance(s, ast.Param)}
    code, rec = _check_routes(args, src, defines, params)
    flags = _flags(src.node, defines)
    if not flags:
        return code, rec
    codes, recs = [code], [rec]
    for name, value in flags:
        if args.format == "text":
            print(f"{args.file}: kernel '{src.name}' with {name}={value!r} (a flag its reference reads: both values "
                  "are checked; -D sets one)")
        c, r = _check_routes(args, src, {**defines, name: value}, params)
        codes.append(c)
        recs.append({"flag": {name: value}, **r})
    code = EXIT_ERROR if EXIT_ERROR in codes else EXIT_UNKNOWN if EXIT_UNKNOWN in codes else max(codes)
    rec = {**recs[0], "flags": recs[1:]}
    if code != codes[0]:
        rec["status"] = {EXIT_ERROR: "violated", EXIT_UNKNOWN: "unknown"}.get(code, rec.get("status"))
    return code, rec


def _flags(node, defines: dict[str, object]) -> list[tuple[str, bool]]:
    """The boolean params the kernel's reference reads (CAUSAL): each poses another problem with the same
    arguments, which a caller picks with a keyword, so `argus check` verifies its other value too (one flag
    flipped at a time), unless -D (or a .py decorator) sets it. A causal attention that verified at its
    non-causal default read a stage no copy filled, or hung, when a query block saw no key (2026-12-06)."""
    from argus.specialize import param_values, reference_params

    values = param_values(node, defines)
    return [(p, not values[p]) for p in sorted(reference_params(node))
            if p not in defines and isinstance(values.get(p), bool)]


def _check_routes(args, src, defines: dict[str, object], params: set[str]) -> tuple[int, dict]:
    """One kernel with one set of params, and the `specialize` sets and routes it selects."""
    from argus.dsl import ast
    from argus.sources import load_source
    from argus.specialize import route, specializations

    # every `specialize` param set is checked too, each for all dims (the runtime may pick any of them);
    # a route's kernel with the route's params (its arguments and reference shown equal first)
    variants: list = [(None, src, defines)]
    sf = None  # the file's kernels, read once if a route needs them
    for sp in specializations(src.node, {k: v for k, v in defines.items() if k in params}):
        if sp.kernel is None:
            variants.append((sp, src, {**defines, **sp.params}))
        else:
            sf = sf or load_source(args.file)
            target = route(src.node, sp, [k.node for k in sf.kernels], sf.layers)
            dims = {k: v for k, v in defines.items() if k not in params}
            if isinstance(target, ast.Layer):
                variants.append((sp, (target, sf), {**dims, **sp.params}))
            else:
                variants.append((sp, sf.select(target.name), {**dims, **sp.params}))
    codes, recs = [], []
    for sp, one, d in variants:
        if sp is not None and args.format == "text":
            print(f"{args.file}: kernel '{src.name}' {sp.describe()}")
        if isinstance(one, tuple):  # a route to an executable layer
            code, rec = _check_layer(args, one[0], defines_for(one[0], d), one[1])
        else:
            code, rec = _check_params(args, one, d)
        if sp is not None:
            rec = {"specialize": {"line": sp.span.line, "params": sp.params,
                                  **({"kernel": sp.kernel} if sp.kernel else {})}, **rec}
        codes.append(code)
        recs.append(rec)
    code = EXIT_ERROR if EXIT_ERROR in codes else EXIT_UNKNOWN if EXIT_UNKNOWN in codes else max(codes)
    rec = recs[0]
    if len(recs) > 1:
        rec = {**rec, "specializations": recs[1:]}
        if code != codes[0]:
            rec["status"] = {EXIT_ERROR: "violated", EXIT_UNKNOWN: "unknown"}.get(code, rec.get("status"))
    return code, rec


def _verify_ahead(args, walk) -> None:
    """Verify the distinct (kernel, params) sets this command will verify in parallel workers first
    (argus/check_pool.py); `walk` then takes each set's text and record from `args._params_done`."""
    from argus.check_pool import jobs, run_parallel

    n = jobs()
    if n <= 1:
        return
    args._collect = {}
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            walk()
    except Exception:  # noqa: BLE001 - the ordered walk reports whatever went wrong
        return
    finally:
        todo, args._collect = args._collect, None
        args.__dict__.pop("_layer_calls_done", None)  # the first walk's placeholders
    if len(todo) < 2:
        return
    done = run_parallel([(key, lambda src=src, d=d: _check_params(args, src, d)) for key, (src, d) in todo.items()],
                        n)
    memo = args.__dict__.setdefault("_params_done", {})
    for key, ((code, rec), text) in done.items():
        memo[key] = (code, rec, text)


def _check_params(args, src, defines: dict[str, object]) -> tuple[int, dict]:
    """One kernel with one set of params and dims: verified once per command (a set that several routes or
    layers reach, or that the workers of _verify_ahead verified, is taken from `args._params_done`)."""
    from argus.dsl import ast

    # a param given its own default value (a layer's call `k(..., KCHUNK=128)`) is the same set
    literal = {s.name: s.default.value for s in src.node.body
               if isinstance(s, ast.Param) and isinstance(s.default, ast.Const)}
    same = {k: v for k, v in defines.items() if not (k in literal and literal[k] == v and type(literal[k]) is type(v))}
    key = (src.name, repr(sorted(same.items(), key=lambda kv: kv[0])))
    collect = getattr(args, "_collect", None)
    if collect is not None:  # _verify_ahead's first walk: note the set, verify nothing
        collect.setdefault(key, (src, dict(defines)))
        return EXIT_OK, {}
    memo = args.__dict__.setdefault("_params_done", {})
    if key in memo:
        code, rec, text = memo[key]
        if args.format == "text":
            print(text if text is not None else f"{args.file}: kernel '{src.name}' with these params: as checked "
                  "above", end="" if text is not None else "\n")
        memo[key] = (code, rec, None)  # printed now; a second visit says so
        return code, rec
    code, rec = _verify_params(args, src, defines)
    memo[key] = (code, rec, None)
    return code, rec


def _verify_params(args, src, defines: dict[str, object]) -> tuple[int, dict]:
    from argus.interp.budget import check_dims
    from argus.ir.printer import kernel as print_kernel
    from argus.records import lowered_record

    if args.no_verify:
        t0 = time.perf_counter()
        k = src.build(defines)
        check_dims(k, defines)
        dt = time.perf_counter() - t0
        if args.emit_ir and args.format == "text":
            print(print_kernel(k), end="")
        if args.format == "text":
            print(f"{args.file}: kernel '{k.name}' ok ({dt * 1000:.0f} ms, not verified)")
        return EXIT_OK, lowered_record(args.file, k.name, dt)
    from argus.analysis import VERIFIED, VIOLATED
    from argus.verification import verify_kernel

    v = verify_kernel(src.node, defines, file=args.file, replay=not args.no_replay, test=not args.no_test)
    if args.format == "text":
        if args.emit_ir:
            print(print_kernel(v.ir), end="")
        print(v.render(args.timings))
        if args.timings:
            print(f"  total {v.seconds * 1000:.0f} ms")
    return {VERIFIED: EXIT_OK, VIOLATED: EXIT_ERROR}.get(v.status, EXIT_UNKNOWN), v.to_json()


def cmd_build(args) -> int:
    """Every kernel of the file (or the one --kernel names), each -D going to the kernels that have it."""
    from argus.codegen.artefact import build_command
    from argus.sources import load_source

    src = load_source(args.file)
    defines = _defines(args)
    if args.kernel is not None or len(src.kernels) <= 1:  # none: select's error
        kernels = [_build_as_launched(args, src, defines)]
    else:
        used = {n for k in src.kernels for n in defines_for(k.node, defines)}
        unused = [n for n in defines if n not in used]
        if unused:
            raise ArgusError(Diagnostic("error", "unknown-define", f"-D {unused[0]}: no kernel of {args.file} has a "
                                        "param or dimension of that name", None,
                                        ("kernels: " + ", ".join(k.name for k in src.kernels),)))
        kernels = [k.build(defines_for(k.node, defines)) for k in src.kernels]
    return build_command(args.file, kernels, emit=args.emit, arch=args.arch, output=args.output, fmt=args.format,
                         force=args.force)


def _build_as_launched(args, src, defines: dict[str, object]):
    """The kernel a launch at the -D dims runs: where they select a `specialize` line (all the dims its
    conditions read given), that line's params or routed kernel, with a note saying so (as `run` does)."""
    from argus.ir.build import build_kernel
    from argus.specialize import selected, with_specialization

    ks = src.select(args.kernel)
    d = ks.defines(defines)
    sp = selected(ks.node, d)
    if sp is None:
        return ks.build(defines)
    node, routed = with_specialization(ks.node, d, [k.node for k in src.kernels])
    if args.format == "text":
        print(f"{args.file}: kernel '{ks.name}' at these dims takes its {sp.describe()}: building that",
              file=sys.stderr)
    return build_kernel(node, routed)


def cmd_run(args) -> int:
    from argus import metadata
    from argus.interp.run import run_interp
    from argus.records import run_record

    defines = _defines(args)
    layer = _executable_layer(args.file, args.kernel, defines)
    if layer is not None:
        from argus.layer_run import run_layer

        return run_layer(args.file, layer, defines, gpu=not args.interp, bench=args.bench, seed=args.seed,
                         iters=args.iters, fmt=args.format)
    if not args.interp:
        from argus.runtime.bench import run_command

        return run_command(args.file, defines, args.kernel, bench=args.bench, seed=args.seed, iters=args.iters,
                           arch=args.arch, fmt=args.format)
    k = metadata.build_for_run(args.file, defines, args.kernel)  # -D T= etc. may size a metadata builder
    res = run_interp(k, defines, seed=args.seed)
    if args.format == "json":
        print(json.dumps(run_record(args.file, k.name, "interp", res.ok, res.dims or {}, res.seconds, res.checks),
                         indent=2))
    else:
        dims = " ".join(f"{d}={(res.dims or defines)[d]}" for d in k.dims)
        print(f"{args.file}: kernel '{k.name}' {dims} (interpreter, {res.seconds:.2f} s)")
        for c in res.checks:
            print(f"  {'ok  ' if c.ok else 'FAIL'} {c.describe()}")
    return EXIT_OK if res.ok else EXIT_ERROR


def _executable_layer(file: str, name: str | None, defines: dict[str, object]):
    """The layer `name` of FILE as an argus.Layer when it calls kernels (argus/layers.py), else None."""
    if name is None:
        return None
    from argus.dsl import ast
    from argus.layers import Layer, plan_layer
    from argus.sources import load_source

    sf = load_source(file)
    g = next((g for g in sf.layers if g.name == name), None)
    if g is None:
        return None
    plan = plan_layer(g, [k.node for k in sf.kernels])
    if not plan.executable:
        return None
    params = {s.name for s in g.body if isinstance(s, ast.Param)}
    return Layer(plan, {k: v for k, v in defines.items() if k in params})


def _exhausted(args, what: str) -> int:
    """A resource limit ended the work: unknown for check (no verdict), an error otherwise."""
    unknown = args.command == "check"
    hint = "--time-limit" if "time" in what else "--memory-limit"
    d = Diagnostic("error", "limit", f"{args.command} stopped: {what}", None,
                   (f"raise it with {hint}, or give smaller dims" + ("; the verdict is unknown" if unknown else ""),))
    fmt = getattr(args, "format", "text")
    if fmt == "json":
        from argus.records import error_record

        print(json.dumps(error_record(getattr(args, "file", None), [d], "unknown" if unknown else "error"), indent=2))
    else:
        print(render_all([d]), file=sys.stderr)
    return EXIT_UNKNOWN if unknown else EXIT_ERROR


def _dispatch(args) -> int:
    """Run one command; every failure becomes a diagnostic (never a traceback) and an exit status."""
    fmt = getattr(args, "format", "text")
    try:
        if args.command == "tune":
            from argus.agent.cli import cmd_tune

            return cmd_tune(args)
        return {"check": cmd_check, "run": cmd_run, "build": cmd_build}[args.command](args)
    except ArgusError as exc:
        if fmt == "json":
            from argus.records import error_record

            print(json.dumps(error_record(args.file, exc.diagnostics), indent=2))
        else:
            print(render_all(exc.diagnostics), file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # output piped into `head` and the reader went away: not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except MemoryError:
        return _exhausted(args, "out of memory" + (f" (the limit is {format_bytes(args.memory_limit)})"
                                                   if getattr(args, "memory_limit", None) else ""))
    except RecursionError:  # bounded inputs should never get here; say what happened, not "internal error"
        d = Diagnostic("error", "nesting", "the program is nested too deeply for Argus to process (RecursionError)",
                       None, ("split deep expressions with intermediate names",))
        if fmt == "json":
            from argus.records import error_record

            print(json.dumps(error_record(getattr(args, "file", None), [d]), indent=2))
        else:
            print(render_all([d]), file=sys.stderr)
        return EXIT_ERROR
    except Exception as exc:  # a compiler bug: say so plainly, never dump a traceback on the user
        if os.environ.get("ARGUS_DEBUG"):
            raise
        from argus.escape import terminal

        d = Diagnostic("error", "internal", f"internal compiler error: {type(exc).__name__}: {terminal(str(exc))}",
                       None, ("this is a bug in Argus; rerun with ARGUS_DEBUG=1 for a traceback and report it",))
        print(render_all([d], fmt), file=sys.stderr if fmt == "text" else sys.stdout)
        return EXIT_INTERNAL


def _captured(args) -> tuple[int, bytes, bytes]:
    """In the bounded child: run the command with its output kept, to be written by the parent."""
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="backslashreplace", write_through=True)
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="backslashreplace", write_through=True)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = _dispatch(args)
    return code, out.buffer.getvalue(), err.buffer.getvalue()


def _write(stream, data: bytes) -> None:
    if not data:
        return
    buf = getattr(stream, "buffer", None)
    if buf is not None:
        stream.flush()
        buf.write(data)
        buf.flush()
    else:
        stream.write(data.decode("utf-8", errors="backslashreplace"))


def _escaped(data: bytes) -> bytes:
    """Text for a terminal: whatever a report quotes (source lines, compiler logs) shows control
    characters as visible escapes (a no-op on what was escaped already)."""
    from argus.escape import terminal

    return terminal(data.decode("utf-8", errors="backslashreplace")).encode()


def _bounded(args) -> int:
    """check / run / build in a child process under --time-limit and --memory-limit."""
    from argus.agent.isolate import run_isolated

    gpu = args.command == "run" and not args.interp
    limits = Limits(args.time_limit, None if gpu else args.memory_limit)
    # a forked child cannot use a CUDA context its parent created (a test process, a Python caller): spawn
    r = run_isolated(_captured, args, timeout_s=limits.time_s, memory_bytes=limits.memory_bytes,
                     start_method="spawn" if gpu else "fork")
    if r.status == "ok":
        code, out, err = r.value
        if not (args.command == "build" and args.output == "-"):  # a cubin on stdout stays bytes
            out = _escaped(out)
        err = _escaped(err)
        try:
            _write(sys.stdout, out)
            _write(sys.stderr, err)
        except BrokenPipeError:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 141
        return code
    if r.status == "timeout":
        return _exhausted(args, f"the time limit of {limits.time_s:g} s was reached")
    if r.status == "memory":
        return _exhausted(args, f"out of memory (the limit is {r.error})")
    if r.status == "fault":  # a native library aborting on a failed allocation lands here too
        return _exhausted(args, f"the worker process {r.describe()}; most likely the memory limit "
                          f"({format_bytes(args.memory_limit)}) was reached")
    print(f"argus: internal error in the worker process: {r.error.splitlines()[0] if r.error else 'no result'}",
          file=sys.stderr)
    if os.environ.get("ARGUS_DEBUG"):
        print(r.error, file=sys.stderr)
    return EXIT_INTERNAL


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)  # a bad command line exits 2 here, with argparse's message
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    if args.command == "tune":  # long-running and streaming; its own work runs in bounded children
        return _dispatch(args)
    try:
        return _bounded(args)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
