"""Replaying a counterexample in the interpreter, at its concrete dims, to confirm it.

Output checks (tags, stores, coverage) are confirmed by a wrong output element; races and async
hazards by the interpreter's shadow memory observing them; bounds errors and deadlocks by the
interpreter stopping with that error. Static layout facts are confirmed by evaluation when found.
"""

from __future__ import annotations

import math

import numpy as np

from argus.analysis.findings import Finding, Replay
from argus.dsl.diagnostics import ArgusError
from argus.interp.machine import execute
from argus.interp.run import compare, make_arrays, reference_env, resolve_scalars
from argus.ir import nodes as ir

MAX_ELEMENTS = 1 << 22  # replay only shapes the interpreter runs in seconds

HAZARD_CODES = {"race": {"race"}, "async-overwrite": {"async-overwrite", "race", "async-read-before-wait"},
                "output-written-twice": {"output-written-twice"},
                "async-read-before-wait": {"async-read-before-wait"}}


def _emphasise(kernel: ir.Kernel, arrays: dict[str, np.ndarray], values: dict[str, object],
               factor: float = 64.0) -> None:
    """Make the inputs the counterexample names stand out of the rounding noise, by a power-of-two
    factor (exact in any float format): a whole slice for a coordinate named by axis (K=640, a
    contracted coordinate claimed to be dropped), the one element for a tensor's full coordinate
    (V.B=0 V.HKV=0 V.SKV=447 V.D=0, an element the reference uses and the kernel does not)."""
    for t in kernel.tensors:
        if t.name in kernel.outputs or not t.dtype.is_float:
            continue
        keys = [f"{t.name}.{d}" if isinstance(d, str) else f"{t.name}.axis{axis}" for axis, d in enumerate(t.dims)]
        own = [values.get(k) for k in keys]
        a = arrays[t.name]
        if all(isinstance(v, int) for v in own):
            if all(0 <= v < n for v, n in zip(own, a.shape)):
                a[tuple(own)] *= factor
            continue
        for axis, d in enumerate(t.dims):
            v = values.get(d) if isinstance(d, str) else None
            if isinstance(v, int) and 0 <= v < a.shape[axis]:
                idx = [slice(None)] * a.ndim
                idx[axis] = v
                a[tuple(idx)] *= factor


def _stop_confirms(f: Finding, code: str) -> bool:
    """Does the interpreter stopping with `code` confirm finding f? A broken producer/consumer ring
    protocol stops the interpreter's role schedule (every role waiting) whatever the GPU would do first:
    read a stage early, overwrite one, or hang."""
    if f.check.startswith("oob"):
        return code == "out-of-bounds"
    if f.check == "deadlock":
        return code == "deadlock"
    ring = f.counterexample is not None and "ring position q" in f.counterexample.values
    return ring and code == "deadlock"


def replay(kernel: ir.Kernel, defines: dict[str, object], f: Finding, seed: int = 0) -> Replay:
    if f.replay is not None:
        return f.replay
    cx = f.counterexample
    if cx is None:
        return Replay(False, "no counterexample to replay")
    from argus import moe

    if moe.is_moe_kernel(kernel):
        return _replay_routed(kernel, defines, f, seed)
    # static findings carry no dims: replay them at a small shape that is not a tile multiple
    dims = {d: int(cx.dims.get(d, defines.get(d, 200))) for d in kernel.dims}
    if any(v < 1 for v in dims.values()):
        return Replay(False, f"not replayed: dims {dims} are not all positive")
    sizes = [math.prod(dims[d] if isinstance(d, str) else d for d in t.dims) for t in kernel.tensors]
    if sum(sizes) > MAX_ELEMENTS:
        return Replay(False, f"not replayed: dims {dims} are too large for the interpreter")
    try:
        scalars = resolve_scalars(kernel, defines)
    except ArgusError as exc:
        return Replay(False, f"not replayed: {exc}")
    # the emphasised element may push the output either way: try both signs before giving up
    first = None
    for factor in (64.0, -64.0):
        got = _replay_once(kernel, dims, scalars, f, cx, seed, factor)
        if got.confirmed:
            return got
        first = first or got
        if got.summary.startswith(("blocked:", "no reference")):
            break
    return first


def _replay_once(kernel: ir.Kernel, dims: dict, scalars: dict, f: Finding, cx, seed: int, factor: float) -> Replay:
    arrays = make_arrays(kernel, dims, np.random.default_rng(seed))
    _emphasise(kernel, arrays, cx.values, factor)
    inputs = {n: a.copy() for n, a in arrays.items()}
    try:
        hazards = execute(kernel, arrays, dims, scalars, observe_hazards=True)
    except ArgusError as exc:
        d = exc.diagnostics[0]
        ok = _stop_confirms(f, d.code)
        where = f" ({d.notes[0]})" if d.notes else ""
        if ok:
            return Replay(True, f"interpreter stopped: {d.message}{where}")
        # another fault comes first on this input, so this counterexample cannot be reached
        return Replay(False, f"blocked: the interpreter stopped earlier: {d.message}{where}")
    if f.check in HAZARD_CODES:
        want = HAZARD_CODES[f.check]
        same = [h for h in hazards if h.code in want]
        if same:
            return Replay(True, "interpreter observed " + same[0].describe())
    if kernel.reference is None:
        return Replay(False, "no reference: block to compare the output with")
    from argus.dsl.reference import evaluate_reference

    ref = evaluate_reference(kernel.reference, reference_env(kernel, inputs, dims, scalars))
    for o in kernel.outputs:
        c = compare(o, arrays[o], ref[o], kernel.tensor(o).dtype, strict=True)
        if not c.ok:
            if c.first_bad is not None:
                idx, got, want = c.first_bad
                return Replay(True, f"interpreter confirms {o}[{', '.join(map(str, idx))}] = {got:.4g} vs reference "
                                    f"{want:.4g} ({c.bad} wrong element{'s' if c.bad != 1 else ''}, dims {dims})")
            return Replay(True, f"interpreter confirms a wrong {o}: {c.describe()}")
    if hazards:
        return Replay(True, "interpreter observed " + hazards[0].describe())
    return Replay(False, f"the interpreter ran dims {dims} and found the output correct and no hazard")


def _replay_routed(kernel: ir.Kernel, defines: dict[str, object], f: Finding, seed: int) -> Replay:
    """Kernels over MoE routing metadata: the metadata must satisfy the kernel's assumes, so replay
    builds a real routing with argus.moe (irregular expert sizes, one expert without tokens) rather
    than random integers, and runs the grid in launch order and in reverse (the GPU may run blocks in
    any order: a row written by two blocks shows its wrong value in one of the two orders)."""
    import itertools

    from argus import moe
    from argus.interp.machine import grid_size

    fixed = {d: int(defines[d]) for d in ("T", "E", "KTOP", "HID", "F") if d in defines}
    dims, meta = moe.routed_dims(kernel, tokens=fixed.get("T", 37), experts=fixed.get("E", 4),
                                 top_k=fixed.get("KTOP", 2), hid=fixed.get("HID", 72), ffn=fixed.get("F", 80),
                                 seed=seed)
    try:
        scalars = resolve_scalars(kernel, defines)
    except ArgusError as exc:
        return Replay(False, f"not replayed: {exc}")
    counts = np.bincount(meta["row_expert"], minlength=dims.get("E", 0)) if "E" in dims else None
    where = f"routing T={int(meta['pos'].shape[0])} top-{int(meta['pos'].shape[1])}" + \
        (f", rows per expert {counts.tolist()}" if counts is not None else "") + f", dims {dims}"
    rng = np.random.default_rng(seed)
    base = moe.make_inputs(kernel, dims, meta, rng)
    grid = grid_size(kernel, dims, scalars)
    blocks = list(itertools.product(*(range(n) for n in grid)))
    hazard_note = None
    for order, name in ((blocks, "launch order"), (blocks[::-1], "reverse block order")):
        arrays = {n: a.copy() for n, a in base.items()}
        try:
            hazards = execute(kernel, arrays, dims, scalars, blocks=order, observe_hazards=True)
        except ArgusError as exc:
            d = exc.diagnostics[0]
            ok = _stop_confirms(f, d.code)
            note = f" ({d.notes[0]})" if d.notes else ""
            return Replay(ok, ("interpreter stopped: " if ok else "blocked: the interpreter stopped earlier: ")
                          + f"{d.message}{note} [{where}]")
        want = HAZARD_CODES.get(f.check)
        if want:
            same = [h for h in hazards if h.code in want]
            if same:
                return Replay(True, f"interpreter observed {same[0].describe()} [{where}]")
        if hazards and hazard_note is None:
            hazard_note = hazards[0].describe()
        if kernel.reference is None:
            return Replay(False, "no reference: block to compare the output with")
        from argus.dsl.reference import evaluate_reference

        ref = evaluate_reference(kernel.reference, reference_env(kernel, base, dims, scalars))
        for o in kernel.outputs:
            c = compare(o, arrays[o], ref[o], kernel.tensor(o).dtype, strict=True)
            if not c.ok and c.first_bad is not None:
                idx, got, want_v = c.first_bad
                return Replay(True, f"interpreter confirms {o}[{', '.join(map(str, idx))}] = {got:.4g} vs reference "
                                    f"{want_v:.4g} ({c.bad} wrong element{'s' if c.bad != 1 else ''}, {name}; {where})")
    if hazard_note:
        return Replay(True, f"interpreter observed {hazard_note} [{where}]")
    return Replay(False, f"the interpreter ran a real routing in both block orders and found the output correct "
                         f"and no hazard [{where}]")
