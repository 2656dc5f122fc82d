"""Replaying a counterexample in the interpreter, at its concrete dims, to confirm it.

Output checks (tags, stores, coverage) are confirmed by a wrong output element; races and async
hazards by the interpreter's shadow memory observing them; bounds errors and deadlocks by the
interpreter stopping with that error. Static layout facts are confirmed by evaluation when found.
"""

from __future__ import annotations

import math

import numpy as np

from argus.analysis.contract_inputs import contract_scalars, data_tensors, solve_contents
from argus.analysis.findings import Finding, Replay
from argus.dsl.diagnostics import ArgusError
from argus.interp.machine import execute
from argus.interp.run import compare, make_arrays, reference_env, resolve_scalars
from argus.ir import nodes as ir

MAX_ELEMENTS = 1 << 22  # replay only shapes the interpreter runs in seconds

HAZARD_CODES = {"race": {"race"}, "async-overwrite": {"async-overwrite", "race", "async-read-before-wait"},
                "output-written-twice": {"output-written-twice"},
                "async-read-before-wait": {"async-read-before-wait"}, "uninitialized-read": {"uninitialized-read"}}


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
    if f.check in ("deadlock", "division-by-zero"):
        return code == f.check
    ring = f.counterexample is not None and "ring position q" in f.counterexample.values
    return ring and code == "deadlock"


def replay(kernel: ir.Kernel, defines: dict[str, object], f: Finding, seed: int = 0, contexts=None) -> Replay:
    """Run the counterexample's configuration in the interpreter. Integer inputs (routing metadata,
    schedules) are built from the kernel's own assumes with the counterexample's values pinned
    (argus.analysis.contract_inputs), floats are random with the named coordinates emphasised; the grid
    runs in launch order and in reverse (the GPU may run blocks in any order: an element written by two
    blocks shows its wrong value in one of the two)."""
    if f.replay is not None:
        return f.replay
    cx = f.counterexample
    if cx is None:
        return Replay(False, "no counterexample to replay")
    # static findings carry no dims: replay them at a small shape that is not a tile multiple
    dims = {d: int(cx.dims.get(d, defines.get(d, 200))) for d in kernel.dims}
    if any(v < 1 for v in dims.values()):
        return Replay(False, f"not replayed: dims {dims} are not all positive")
    if _too_large(kernel, dims):
        # the model's dims are only one witness: the interpreter runs small valid dims instead
        small = _small_dims(kernel, defines, contexts)
        if small is None:
            return Replay(False, f"not replayed: dims {dims} are too large for the interpreter")
        dims = small
    try:
        # the model's integer scalar arguments (the verifier proves for every value) before the defaults
        scalars = resolve_scalars(kernel, {**defines, **cx.scalars})
    except ArgusError as exc:
        return Replay(False, f"not replayed: {exc}")
    first = None
    # contents solved with the model's scalars fixed, as the interpreter runs them
    fixed = {**defines, **{k: v for k, v in cx.scalars.items() if isinstance(v, int)}}
    for dims_i, metadata, note, own in _inputs(kernel, dims, fixed, cx, seed, contexts, defines):
        run_scalars = resolve_scalars(kernel, {**defines, **cx.scalars, **own}) if own else scalars
        # the emphasised element may push the output either way: try both signs before giving up
        for factor in (64.0, -64.0):
            blocked = False
            for reverse in (False, True):
                got = _replay_once(kernel, dims_i, run_scalars, f, cx, seed, factor, metadata, reverse)
                if got.confirmed:
                    return Replay(True, got.summary + note) if note else got
                first = first or got
                blocked = got.summary.startswith(("blocked:", "no reference"))
                if blocked:
                    break
            if blocked:
                break  # another fault comes first with these inputs: try the next ones
    return first


def _too_large(kernel: ir.Kernel, dims: dict) -> bool:
    sizes = [math.prod(dims[d] if isinstance(d, str) else d for d in t.dims) for t in kernel.tensors]
    return sum(sizes) > MAX_ELEMENTS


def _small_dims(kernel: ir.Kernel, defines: dict, contexts) -> dict | None:
    if not contexts:
        return None
    from argus.analysis.numeric import pick_shapes

    for shape in pick_shapes(kernel, list(contexts[0].constraints), contexts[0].dims, defines)[::-1]:
        if not _too_large(kernel, shape):
            return shape
    return None


def _inputs(kernel: ir.Kernel, dims: dict, defines: dict, cx, seed: int, contexts, free: dict | None = None):
    """(dims, integer tensor contents, note, integer scalars) to try in turn. Contents come from the kernel's
    contract: with the counterexample's values pinned, then any (diverse) contents at its dims, then other
    valid dims (the verifier instantiates quantified contracts only where a proof needs them, so its values
    may break one elsewhere, and its dims may admit no contents at all). `defines` fixes the model's integer
    scalars; where they admit no contents (a max_seqlen of 1 beside a long sequence), the contract chooses
    them too (`free`: the defines without them), and the run takes those."""
    if not data_tensors(kernel):
        yield dims, {}, "", {}
        return
    pins = {k: v for k, v in cx.values.items() if "[" in k and isinstance(v, int)}
    tried = 0
    for p in ([pins] if pins else []) + [{}]:
        got = solve_contents(kernel, dims, defines, p, seed)
        if not isinstance(got, str):
            tried += 1
            yield dims, got, "" if p else " (metadata from the kernel's contract)", {}
    loose = free if free is not None and free != defines else None
    if loose is not None and not tried:
        got = solve_contents(kernel, dims, loose, {}, seed)
        if not isinstance(got, str):
            tried += 1
            yield dims, got, " (metadata and integer scalars from the kernel's contract)", \
                contract_scalars(kernel, dims, loose)
    if contexts:
        from argus.analysis.numeric import pick_shapes

        for shape in pick_shapes(kernel, list(contexts[0].constraints), contexts[0].dims, defines):
            # the model's scalars first; where they admit no contents or too large a grid at this shape (a
            # max_seqlen of 6913 at three tokens), the contract chooses them
            for d, own in ((defines, False), (loose, True)):
                if d is None:
                    continue
                got = solve_contents(kernel, shape, d, {}, seed)
                if not isinstance(got, str):
                    tried += 1
                    yield shape, got, " (at other dims: the counterexample's admit no metadata satisfying the " \
                        "contract)", contract_scalars(kernel, shape, d) if own else {}
                    break
    if not tried:
        yield dims, {}, "", {}


def _replay_once(kernel: ir.Kernel, dims: dict, scalars: dict, f: Finding, cx, seed: int, factor: float,
                 metadata: dict, reverse: bool) -> Replay:
    import itertools

    from argus.interp.machine import grid_size

    arrays = make_arrays(kernel, dims, np.random.default_rng(seed))
    arrays.update({k: v.copy() for k, v in metadata.items()})
    _emphasise(kernel, arrays, cx.values, factor)
    inputs = {n: a.copy() for n, a in arrays.items()}
    blocks = None
    order = "launch order"
    if reverse:
        try:
            grid = grid_size(kernel, dims, scalars)
        except ArgusError as exc:
            return Replay(False, f"blocked: {exc.diagnostics[0].message}")
        blocks = list(itertools.product(*(range(n) for n in grid)))[::-1]
        order = "reverse block order"
    try:
        hazards = execute(kernel, arrays, dims, scalars, blocks=blocks, observe_hazards=True)
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

    try:
        ref = evaluate_reference(kernel.reference, reference_env(kernel, inputs, dims, scalars))
        checks = [(o, compare(o, arrays[o], ref[o], kernel.tensor(o).dtype, strict=True)) for o in kernel.outputs]
    except ArgusError as exc:  # the reference fails on these inputs: nothing to compare with
        return Replay(False, f"not replayed: {exc.diagnostics[0].message}")
    for o, c in checks:
        if not c.ok:
            if c.first_bad is not None:
                idx, got, want = c.first_bad
                return Replay(True, f"interpreter confirms {o}[{', '.join(map(str, idx))}] = {got:.4g} vs reference "
                                    f"{want:.4g} ({c.bad} wrong element{'s' if c.bad != 1 else ''}, dims {dims}, "
                                    f"{order})")
            return Replay(True, f"interpreter confirms a wrong {o}: {c.describe()}")
    if hazards:
        return Replay(True, "interpreter observed " + hazards[0].describe())
    return Replay(False, f"the interpreter ran dims {dims} in both block orders and found the output correct and "
                         "no hazard")
