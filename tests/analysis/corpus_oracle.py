"""The interpreter oracle for the verifier corpus (tests/analysis/corpus).

Every corpus file is one or more kernels (plus, possibly, a `layer`) with a header of comment lines:

    # class: <bug class>
    # expect: <check code>            (broken files: the check that must flag it, or
                                        `reference-footprint` / `tested`; `a | b`: any of them)
    # bug: <one line>                 (broken files)
    # base: <correct file it derives from>
    # dims: M=200 N=136 K=72; M=64 N=64 K=520     (2-3 shape sets, `;`-separated)
    # params: BM=64 BN=64                          (optional: compile-time overrides)
    # scalars: alpha=1.5 beta=0.75                 (optional: runtime scalar arguments, else defaults)
    # oracle: not observable by the interpreter today (<why>)   (optional)

`judge(path)` runs every kernel of the file in the interpreter at every shape set, on fresh random
inputs (a real routing for the MoE kernels, whose dims are then the routing sizes T, E, KTOP, HID, F),
with the shadow memory on, and compares each output with the kernel's `reference:` block in float64.
A file is *wrong* when some kernel at some shape gives a wrong output, stops with an interpreter fault
(out of bounds, deadlock, ...), or shows an observed hazard (race, async hazard, an output element
written twice); otherwise it is *correct*. A violated `assume` is not a verdict: it means the shape set
does not fit the kernel, and raises `OracleError`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

CORPUS = Path(__file__).resolve().parent / "corpus"

MOE_SIZES = ("T", "E", "KTOP", "HID", "F")  # the sizes of a routing (argus.moe.routed_dims)


class OracleError(Exception):
    """The corpus file or its header is unusable (not a verdict on the kernel)."""


@dataclass
class Header:
    klass: str = ""
    expect: str | None = None
    bug: str | None = None
    base: str | None = None
    oracle: str | None = None  # "not observable ..." for bugs the interpreter cannot show today
    dims: list[dict[str, int]] = field(default_factory=list)
    params: dict[str, object] = field(default_factory=dict)
    scalars: dict[str, object] = field(default_factory=dict)
    summary: str = ""  # the line saying what the file exercises

    @property
    def expects(self) -> set[str]:
        """`expect: a | b`: a bug that more than one check catches names each (any one must flag it)."""
        return {e.strip() for e in (self.expect or "").split("|") if e.strip()}

    @property
    def observable(self) -> bool:
        return not (self.oracle or "").startswith("not observable")


def _value(text: str) -> object:
    text = text.strip()
    if text in ("True", "False"):
        return text == "True"
    if text.startswith(("'", '"')):
        return text[1:-1]
    try:
        return int(text)
    except ValueError:
        return float(text)


def _assignments(text: str) -> dict[str, object]:
    return {k: _value(v) for k, v in re.findall(r"(\w+)=(\"[^\"]*\"|'[^']*'|\S+)", text)}


def parse_header(path: Path) -> Header:
    h = Header()
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        m = re.match(r"#\s*(\w+):\s*(.*)$", line)
        if not m:
            continue
        key, val = m.group(1), m.group(2).strip()
        if key == "class":
            h.klass = val
        elif key == "expect":
            h.expect = val
        elif key == "bug":
            h.bug = val
        elif key == "base":
            h.base = val
        elif key == "oracle":
            h.oracle = val
        elif key == "exercises":
            h.summary = val
        elif key == "dims":
            h.dims = [{k: int(v) for k, v in _assignments(part).items()} for part in val.split(";") if part.strip()]
        elif key == "params":
            h.params = _assignments(val)
        elif key == "scalars":
            h.scalars = _assignments(val)
    if not h.dims:
        raise OracleError(f"{path.name}: no '# dims:' line")
    return h


@dataclass
class Verdict:
    wrong: bool
    reason: str
    kernel: str = ""
    dims: dict[str, int] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{'WRONG' if self.wrong else 'correct'}: {self.kernel} {self.dims}: {self.reason}"


def kernel_names(path: Path) -> list[str]:
    from argus.dsl.parser import parse_file

    return [k.name for k in parse_file(path).kernels]


def build(path: Path, name: str, params: dict[str, object]):
    """The kernel `name` of the file, with the header's params that it declares."""
    from argus.dsl import ast
    from argus.dsl.parser import parse_file
    from argus.ir.build import build_kernel

    node = next(k for k in parse_file(path).kernels if k.name == name)
    own = {s.name for s in node.body if isinstance(s, ast.Param)}
    return build_kernel(node, {n: v for n, v in params.items() if n in own})


def run_once(kernel, dims: dict[str, int], seed: int, given: dict | None = None) -> tuple[str | None, dict[str, int]]:
    """Run one kernel at one shape set; returns (why it is wrong or None, the dims it ran at). Integer
    tensors a kernel's assumes constrain (cumulative offsets) come from its contract, as `argus run`
    builds them; `given` scalars (the header's) override the declared defaults."""
    from argus import moe
    from argus.dsl.diagnostics import ArgusError
    from argus.dsl.reference import evaluate_reference
    from argus.interp.machine import execute
    from argus.interp.run import compare, contract_inputs, make_arrays, reference_env, resolve_scalars

    given = {n: v for n, v in (given or {}).items() if n in {s.name for s in kernel.scalars}}
    scalars = resolve_scalars(kernel, given)
    if kernel.metadata == "moe_routing":  # the kernel names the routing builder (argus.metadata)
        sizes = {d: dims[d] for d in MOE_SIZES if d in dims}
        run_dims, meta = moe.routed_dims(kernel, tokens=sizes.get("T", 37), experts=sizes.get("E", 4),
                                         top_k=sizes.get("KTOP", 2), hid=sizes.get("HID", 72),
                                         ffn=sizes.get("F", 80), seed=seed)
        arrays = moe.make_inputs(kernel, run_dims, meta, np.random.default_rng(seed))
    else:
        missing = [d for d in kernel.dims if d not in dims]
        if missing:
            raise OracleError(f"kernel {kernel.name}: no value for {', '.join(missing)} in '# dims:'")
        run_dims = {d: dims[d] for d in kernel.dims}
        rng = np.random.default_rng(seed)
        arrays = make_arrays(kernel, run_dims, rng)
        scalars.update(contract_inputs(kernel, run_dims, given, arrays, rng))
    env = reference_env(kernel, arrays, run_dims, scalars)  # inputs before the kernel writes
    try:
        hazards = execute(kernel, arrays, run_dims, scalars, observe_hazards=True)
    except ArgusError as exc:
        d = exc.diagnostics[0]
        if d.code == "precondition":
            raise OracleError(f"kernel {kernel.name} at {run_dims}: {d.message} ({'; '.join(d.notes)})") from None
        return f"interpreter fault [{d.code}]: {d.message}" + (f" ({d.notes[0]})" if d.notes else ""), run_dims
    if hazards:
        return f"observed hazard [{hazards[0].code}]: {hazards[0].describe()}", run_dims
    ref = evaluate_reference(kernel.reference, env)
    for o in kernel.outputs:
        c = compare(o, arrays[o], ref[o], kernel.tensor(o).dtype)
        if not c.ok:
            return f"wrong output: {c.describe()}", run_dims
    return None, run_dims


def run_layer(path: Path, layer_name: str, dims: dict[str, int], params: dict[str, object], seed: int) -> str | None:
    """Chain the file's kernels in file order over one set of arrays (an output of one kernel is the input
    of the next) and compare the layer's outputs with its reference block; why it is wrong, or None."""
    from argus.dsl.check import check_layer
    from argus.dsl.parser import parse_file
    from argus.dsl.reference import evaluate_reference
    from argus.interp.machine import execute
    from argus.interp.numerics import round_to, storage_dtype
    from argus.interp.run import compare, resolve_scalars, shape_of

    module = parse_file(path)
    checked = check_layer(module.layer(layer_name), {n: v for n, v in params.items()
                                                      if n in {s.name for s in module.layer(layer_name).body}})
    kernels = [build(path, k.name, params) for k in module.kernels]
    if any(k.metadata == "moe_routing" for k in kernels):
        return _run_moe_layer(path, checked, dims, params, seed)
    rng = np.random.default_rng(seed)
    arrays: dict[str, np.ndarray] = {}
    for k in kernels:
        kd = {d: dims[d] for d in k.dims}
        for t in k.tensors:
            if t.name in arrays:
                continue
            shape = shape_of(t, kd)
            if t.name in k.outputs and t.name not in k.inputs:
                arrays[t.name] = np.full(shape, np.nan if t.dtype.is_float else -1, storage_dtype(t.dtype))
            else:
                arrays[t.name] = round_to(rng.standard_normal(shape), t.dtype)
    env = {n: arrays[n].astype(np.float64) for n in checked.tensors if n not in checked.outputs}
    env.update({d: dims[d] for d in checked.dims}, **checked.params)
    for k in kernels:
        kd = {d: dims[d] for d in k.dims}
        try:
            execute(k, arrays, kd, resolve_scalars(k, {}))
        except Exception as exc:  # an interpreter fault in the chain
            return f"layer {layer_name}: kernel {k.name} stopped: {exc}"
    ref = evaluate_reference(checked.layer.reference, env)
    for o in checked.outputs:
        c = compare(o, arrays[o], ref[o], checked.tensors[o].dtype)
        if not c.ok:
            return f"layer {layer_name}: wrong output: {c.describe()}"
    return None


def _run_moe_layer(path: Path, checked, dims: dict[str, int], params: dict[str, object], seed: int) -> str | None:
    """An MoE layer: argus.moe.layer routes on the host and chains moe_up, moe_down, moe_combine through the
    interpreter; argus.moe.moe_layer_reference evaluates the layer's reference block."""
    from argus import moe
    from argus.interp.run import compare

    rng = np.random.default_rng(seed)
    t, e, hid, f = dims.get("T", 37), dims.get("E", 4), dims.get("HID", 72), dims.get("F", 80)
    top_k = int(dims.get("KTOP", checked.params.get("KTOP", 2)))
    x = rng.standard_normal((t, hid))
    logits = rng.standard_normal((t, e))
    logits[:, e - 1] = -1e9  # one expert without tokens
    wg, wu = rng.standard_normal((e, hid, f)) / 8, rng.standard_normal((e, hid, f)) / 8
    wd = rng.standard_normal((e, f, hid)) / 8
    out = moe.layer(x, logits, wg, wu, wd, top_k, params, path=path)
    ref = moe.moe_layer_reference(moe._bf16(x), moe._bf16(wg), moe._bf16(wu), moe._bf16(wd), top_k, logits, path=path)
    c = compare("Out", out, ref, checked.tensors["Out"].dtype)
    return None if c.ok else f"layer {checked.layer.name}: wrong output: {c.describe()}"


def judge(path: Path | str, seed: int = 0) -> Verdict:
    """Correct or wrong, with the reason: every kernel of the file at every shape set of its header, then
    every layer of the file (its kernels chained in file order) against the layer's reference."""
    from argus.dsl.diagnostics import ArgusError
    from argus.dsl.parser import parse_file

    path = Path(path)
    h = parse_header(path)
    last: dict[str, int] = {}
    try:
        module = parse_file(path)
        for name in kernel_names(path):
            kernel = build(path, name, h.params)
            if kernel.reference is None:
                raise OracleError(f"{path.name}: kernel {name} has no reference: block")
            for i, dims in enumerate(h.dims):
                why, last = run_once(kernel, dims, seed + i, h.scalars)
                if why is not None:
                    return Verdict(True, why, name, last)
        for layer in module.layers:
            for i, dims in enumerate(h.dims):
                why = run_layer(path, layer.name, dims, h.params, seed + i)
                if why is not None:
                    return Verdict(True, why, layer.name, dims)
    except ArgusError as exc:
        d = exc.diagnostics[0]
        raise OracleError(f"{path.name}: the front end refused it: {d.message} [{d.code}]") from None
    return Verdict(False, "every kernel (and layer) matches its reference at every shape, no hazard observed", "",
                   last)


def corpus_files(kind: str) -> list[Path]:
    return sorted((CORPUS / kind).glob("*.arg"))


def main(argv: list[str] | None = None) -> int:
    """python -m tests.analysis.corpus_oracle [FILE ...]: print each file's verdict."""
    import sys
    import time

    files = [Path(a) for a in (argv if argv is not None else sys.argv[1:])] or \
        corpus_files("correct") + corpus_files("broken")
    bad = 0
    for f in files:
        t0 = time.perf_counter()
        try:
            v = judge(f)
            text = str(v)
        except OracleError as exc:
            text, v = f"ERROR: {exc}", None
        want_wrong = f.parent.name == "broken" and parse_header(f).observable
        ok = v is not None and v.wrong == want_wrong
        if f.parent.name == "broken" and not parse_header(f).observable:
            text = "not observable today; " + text
        bad += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {f.parent.name}/{f.name} ({time.perf_counter() - t0:.2f} s) {text}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
