"""The `argus` command line: check and run kernels (build and tune arrive with code generation)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from argus.dsl.diagnostics import ArgusError, Diagnostic, render_all

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3


def parse_define(text: str) -> tuple[str, object]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"-D {text}: write NAME=VALUE, e.g. -D M=4096")
    name, value = text.split("=", 1)
    name = name.strip()
    if not name.isidentifier():
        raise argparse.ArgumentTypeError(f"-D {text}: '{name}' is not a name")
    return name, _value(value.strip())


def _value(v: str) -> object:
    if v in ("True", "true"):
        return True
    if v in ("False", "false"):
        return False
    try:
        return int(v, 0)
    except ValueError:
        pass
    try:
        return float(v)
    except ValueError:
        pass
    if len(v) >= 2 and v[0] == v[-1] and v[0] in "\"'":
        return v[1:-1]
    return v


def _defines(args) -> dict[str, object]:
    return dict(args.define or [])


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="an Argus source file (.arg)")
    p.add_argument("-D", dest="define", action="append", type=parse_define, metavar="NAME=VALUE",
                   help="set a compile-time parameter or a runtime dimension (repeatable), e.g. -D BM=64 -D M=4096")
    p.add_argument("--kernel", help="which kernel of the file (default: the first)")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="output format; json diagnostics follow the schema in README.md")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="argus",
        description="Argus: a tile-level GPU kernel language whose compiler proves data-flow invariants.",
        epilog="Exit status: 0 success, 1 errors in the kernel or a wrong result, 2 bad command line.")
    p.add_argument("--version", action="version", version="argus 0.1.0")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    c = sub.add_parser("check", help="parse and check a kernel (syntax, names, types, shapes, launch)",
                       description="Parse FILE, run the semantic checks and lower it to the IR (binding -D "
                       "parameters, expanding pipelines, assigning MMA layouts). Exit 0 if clean, 1 on errors.")
    _common(c)
    c.add_argument("--emit-ir", action="store_true", help="print the lowered IR")
    r = sub.add_parser("run", help="run a kernel in the interpreter and compare with its reference: block",
                       description="Draw fresh random inputs (outputs poisoned with NaN), execute the kernel, "
                       "evaluate its reference: block in float64 and compare. Exit 1 if any output is wrong. "
                       "Runtime dimensions must be given with -D.")
    _common(r)
    r.add_argument("--interp", action="store_true", required=True,
                   help="execute in the NumPy interpreter (the only executor in this version)")
    r.add_argument("--seed", type=int, default=None, help="random seed for the inputs (default: fresh)")
    return p


def cmd_check(args) -> int:
    from argus.ir.build import build_file
    from argus.ir.printer import kernel as print_kernel

    t0 = time.perf_counter()
    k = build_file(args.file, _defines(args), args.kernel)
    dt = time.perf_counter() - t0
    if args.format == "json":
        print(json.dumps({"file": args.file, "kernel": k.name, "status": "ok", "diagnostics": [],
                          "seconds": round(dt, 4)}, indent=2))
    else:
        if args.emit_ir:
            print(print_kernel(k), end="")
        print(f"{args.file}: kernel '{k.name}' ok ({dt * 1000:.0f} ms)")
    return EXIT_OK


def cmd_run(args) -> int:
    from argus.interp.run import run_interp
    from argus.ir.build import build_file

    defines = _defines(args)
    k = build_file(args.file, defines, args.kernel)
    res = run_interp(k, defines, seed=args.seed)
    if args.format == "json":
        print(json.dumps({"file": args.file, "kernel": k.name, "ok": res.ok, "seconds": round(res.seconds, 4),
                          "outputs": [{"name": c.name, "rel_error": c.rel_error, "max_abs_error": c.max_abs_error,
                                       "tolerance": c.tolerance, "wrong_elements": c.bad,
                                       "nonfinite": c.nonfinite, "ok": c.ok,
                                       "first_wrong": None if c.first_bad is None else
                                       {"index": c.first_bad[0], "value": c.first_bad[1],
                                        "reference": c.first_bad[2]}} for c in res.checks]}, indent=2))
    else:
        dims = " ".join(f"{d}={defines[d]}" for d in k.dims)
        print(f"{args.file}: kernel '{k.name}' {dims} (interpreter, {res.seconds:.2f} s)")
        for c in res.checks:
            print(f"  {'ok  ' if c.ok else 'FAIL'} {c.describe()}")
    return EXIT_OK if res.ok else EXIT_ERROR


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    fmt = getattr(args, "format", "text")
    try:
        return {"check": cmd_check, "run": cmd_run}[args.command](args)
    except ArgusError as exc:
        out = render_all(exc.diagnostics, fmt)
        if fmt == "json":
            print(json.dumps({"file": args.file, "status": "error",
                              "diagnostics": [d.to_json() for d in exc.diagnostics]}, indent=2))
        else:
            print(out, file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a compiler bug: say so plainly, never dump a traceback on the user
        if os.environ.get("ARGUS_DEBUG"):
            raise
        d = Diagnostic("error", "internal", f"internal compiler error: {type(exc).__name__}: {exc}", None,
                       ("this is a bug in Argus; rerun with ARGUS_DEBUG=1 for a traceback and report it",))
        print(render_all([d], fmt), file=sys.stderr if fmt == "text" else sys.stdout)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
