"""The numeric tier of `argus check`: the interpreter against the reference at small shapes.

What the data-flow contract cannot see — scales, log bases, the order of a rescale and a sum, alpha
versus beta — is tested, not proved: the kernel runs in the interpreter on fresh random inputs at two
small shapes (one of them not a multiple of the tiles, where the kernel's assumptions allow it) and its
outputs are compared with the reference in float64. The tolerance follows the precision of the
computation, not only the output dtype: a value rounded to bf16 on its way to the output (P before P·V)
bounds the accuracy of an fp32 output too. Shapes come from the kernel's own constraints (its assumes,
as the verifier collected them), so they are valid inputs for it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import z3

from argus.analysis import terms as T
from argus.analysis.symbolic import solver
from argus.dsl.diagnostics import ArgusError
from argus.ir import nodes as ir
from argus.ir.transform import walk

MAX_ELEMENTS = 1 << 20  # tensor elements at one shape: the interpreter runs it in seconds
LIMIT = 300  # dims of the tested shapes stay below this
PINNED_LIMIT = 1 << 16  # ... unless an assume pins one past it (MAX_ELEMENTS still bounds the shape)


@dataclass
class Tested:
    dims: dict[str, int]
    ok: bool
    summary: str
    seconds: float
    first_bad: tuple | None = None  # (output, index, got, want)


@dataclass
class NumericTier:
    shapes: list[Tested] = field(default_factory=list)
    skipped: str | None = None  # why nothing was tested

    @property
    def ok(self) -> bool:
        return all(t.ok for t in self.shapes)

    def to_json(self) -> dict:
        return {"ok": self.ok if self.shapes else None, "skipped": self.skipped,
                "shapes": [{"dims": t.dims, "ok": t.ok, "summary": t.summary, "seconds": round(t.seconds, 3)}
                           for t in self.shapes]}

    def render(self) -> list[str]:
        if not self.shapes:
            return [f"  not tested: {self.skipped}"] if self.skipped else []
        out = []
        for t in self.shapes:
            dims = " ".join(f"{k}={v}" for k, v in t.dims.items())
            out.append(f"  tested at {dims}: {'ok' if t.ok else 'WRONG'} ({t.summary})")
        return out


def tiled_dims(kernel: ir.Kernel) -> set[str]:
    """Dims the kernel cuts into tiles (they appear in a cdiv); the others count things (batch, heads,
    experts, top-k) and stay small in tested shapes."""
    out: set[str] = set()
    for e in walk((kernel.grid, kernel.body)):
        if isinstance(e, ir.Math) and e.fn == "cdiv":
            out |= {x.name for x in walk(e) if isinstance(x, ir.Var)}
    return out & set(kernel.dims)


def tile_widths(kernel: ir.Kernel) -> dict[str, int]:
    """Per tiled dim, the widest constant tile a cdiv cuts it into (cdiv(N, 256): 256)."""
    out: dict[str, int] = {}
    for e in walk((kernel.grid, kernel.body)):
        if isinstance(e, ir.Math) and e.fn == "cdiv" and len(e.args) == 2 and isinstance(e.args[1], ir.Const):
            w = e.args[1].value
            if isinstance(w, int) and not isinstance(w, bool):
                for x in walk(e.args[0]):
                    if isinstance(x, ir.Var) and x.name in kernel.dims:
                        out[x.name] = max(out.get(x.name, 0), w)
    return out


def pick_shapes(kernel: ir.Kernel, constraints: list, dims_z3: dict, defines: dict,
                several_tiles: bool = False) -> list[dict[str, int]]:
    """Two small valid shapes: the tiled dims multiples of 64 in one, not multiples of 8 in the other
    (irregular tails), as far as the kernel's constraints allow; counting dims 2 or 3. With
    `several_tiles`, a third with the tiled dims past 128 and not multiples of 8: loops over tiles then
    run several full steps and a tail (an online-softmax rescale or a causal kv bound is only exercised
    where a row meets more than one full block: at 64 and 65 it meets at most one)."""
    fixed = {d: int(defines[d]) for d in kernel.dims if d in defines}
    tiled = tiled_dims(kernel)
    widths = tile_widths(kernel)
    base = [c for c in constraints if not T.mentions(c, {"block_x", "block_y", "block_z"})]
    out: list[dict[str, int]] = []
    for regular in (True, False) + ((None,) if several_tiles else ()):
        for cap in (LIMIT, PINNED_LIMIT):
            s = solver(3000)
            s.add(*base)
            for d, v in dims_z3.items():
                w = widths.get(d, 0) if regular is None else 0
                s.add(v >= 1, v <= max(cap, 4 * w))  # a tile wider than LIMIT / 4 gets room for two steps
                if d in fixed:
                    s.add(v == fixed[d])
            # an assume that pins a dim past LIMIT (a vocabulary of 1000, a hidden size of 4096) is tested at
            # that size, the other dims small (the interpreter's element budget still applies)
            if s.check() == z3.sat:
                break
        prefs: list[list] = []  # per dim, alternatives in order: the first the constraints allow is kept
        for d, v in dims_z3.items():
            if d in fixed:
                continue
            if d in tiled and regular is None:
                # several steps and a tail; where an assume asks for 16-byte pitches (N % 8 == 0) the tail
                # is a multiple of 8, and the dim stays long (at N = 8 a loop over tiles runs one step)
                # (past one tile of the widest cdiv: with BC = 256, N in 129..255 is one step)
                lo = max(128, widths.get(d, 0))
                hi = max(256, 2 * lo)
                prefs.append([z3.And(v % 8 != 0, v > lo, v < hi), z3.And(v % 64 != 0, v > lo, v < hi),
                              z3.And(v > lo, v < 2 * hi)])
            elif d in tiled and regular:
                prefs.append([z3.And(v % 64 == 0, v <= 128)])
            elif d in tiled:
                prefs.append([z3.And(v % 8 != 0, v > 64, v < 200), z3.And(v % 64 != 0, v > 64, v < 200)])
            elif cap != LIMIT:  # a pinned large dim: counting dims 1 keep the shape within MAX_ELEMENTS
                prefs.append([v == 1, v == (3 if regular is False else 2)])
            else:
                prefs.append([v == (3 if regular is False else 2)])
        # as many preferences as the constraints allow, greedily
        for alts in prefs:
            for p in alts:
                s.push()
                s.add(p)
                if s.check() == z3.sat:
                    break
                s.pop()
        if s.check() != z3.sat:
            continue
        m = s.model()
        shape = {d: m.eval(v, model_completion=True).as_long() for d, v in dims_z3.items()}
        if shape not in out:
            out.append(shape)
    return out


def numeric_tier(kernel: ir.Kernel, defines: dict, contexts, seed: int = 1234) -> NumericTier:
    from argus.analysis.contract_inputs import contract_scalars, inputs_for
    from argus.interp.run import resolve_scalars

    if kernel.reference is None:
        return NumericTier(skipped="no reference: block")
    if not contexts:
        return NumericTier(skipped="the verifier explored no path to take valid shapes from")
    ctx = contexts[0]
    try:
        resolve_scalars(kernel, defines)
    except ArgusError as exc:
        return NumericTier(skipped=exc.diagnostics[0].message)
    tier = NumericTier()
    signed = None  # the first shape that ran: tested again on inputs of one sign
    for n, dims in enumerate(pick_shapes(kernel, list(ctx.constraints), ctx.dims, defines, several_tiles=True)):
        got = inputs_for(kernel, dims, contexts, np.random.default_rng(seed + n), defines)
        if isinstance(got, str):
            if n < 2:  # the third shape is an extra: where it admits no inputs, the first two stand
                tier.skipped = got
            continue
        dims, arrays = got
        if sum(int(np.prod(a.shape)) for a in arrays.values()) > MAX_ELEMENTS:
            if n < 2:
                tier.skipped = f"shape {dims} is too large for the interpreter"
            continue
        # integer scalars the grid reads take the values the contract chose (max_seqlen for the offsets)
        scalars = {**resolve_scalars(kernel, defines), **contract_scalars(kernel, dims, defines)}
        if n >= 1:
            # float scalars the command line leaves open take random values past the first shape: the
            # defaults (alpha = 1, beta = 0) hide a beta scaled by alpha
            rng = np.random.default_rng(seed + 100 + n)
            scalars.update({sc.name: round(float(rng.uniform(0.5, 2.0)), 3) for sc in kernel.scalars
                            if sc.dtype.is_float and sc.name not in defines})
        ran = _run(kernel, tier, dims, arrays, scalars)
        if not ran and tier.shapes and "does not hold" in tier.shapes[-1].summary:
            # an assume about a scalar the random value breaks: the declared defaults instead
            tier.shapes.pop()
            scalars = {**resolve_scalars(kernel, defines), **contract_scalars(kernel, dims, defines)}
            ran = _run(kernel, tier, dims, arrays, scalars)
        if ran and (signed is None or n == 1):
            signed = (dims, arrays, scalars)  # preferably the irregular shape: tails are where fills happen
    if signed is not None and tier.ok:
        # Normal inputs leave a fill of zeros inside a max or min unseen wherever a row has one value of the
        # other sign (at N = 2 most rows do): all-negative, then all-positive inputs show it
        dims, arrays, scalars = signed
        for sign, label in ((-1.0, "all inputs negative"), (1.0, "all inputs positive")):
            if not _run(kernel, tier, dims, _one_sign(kernel, arrays, sign), scalars, label) or not tier.ok:
                break
    if not tier.shapes and tier.skipped is None:
        tier.skipped = "no small shape satisfies the kernel's assumptions"
    return tier


def _one_sign(kernel: ir.Kernel, arrays: dict, sign: float) -> dict:
    """The float inputs as sign * (|x| + 1/4) in their dtype (never zero); outputs poisoned again."""
    from argus.interp.numerics import poison, round_to

    out = {}
    for t in kernel.tensors:
        a = arrays[t.name]
        if t.name in kernel.inputs and t.dtype.is_float:
            a = round_to(sign * (np.abs(a.astype(np.float64)) + 0.25), t.dtype)
        elif t.name in kernel.outputs and t.name not in kernel.inputs:
            a = np.full_like(a, poison(t.dtype))
        out[t.name] = a.copy()
    return out


def _run(kernel: ir.Kernel, tier: NumericTier, dims: dict, arrays: dict, scalars: dict, label: str = "") -> bool:
    """Run one shape in the interpreter and compare with the reference; False if it could not be compared."""
    from argus.dsl.reference import evaluate_reference
    from argus.interp.machine import execute
    from argus.interp.run import compare, reference_env, working_dtype

    inputs = {k: a.copy() for k, a in arrays.items()}
    arrays = {k: a.copy() for k, a in arrays.items()}
    t0 = time.perf_counter()
    note = f"{label}: " if label else ""
    try:
        execute(kernel, arrays, dims, scalars)
    except ArgusError as exc:
        d = exc.diagnostics[0]
        tier.shapes.append(Tested(dims, False, f"{note}the interpreter stopped: {d.message}", time.perf_counter() - t0))
        return False
    seconds = time.perf_counter() - t0
    try:
        ref = evaluate_reference(kernel.reference, reference_env(kernel, inputs, dims, scalars))
    except ArgusError as exc:  # inputs the kernel's contract allows but the reference cannot read
        if not label:
            tier.skipped = f"the reference block failed on inputs built from the kernel's assumes at {dims}: " \
                           f"{exc.diagnostics[0].message}"
        return False
    bad = None
    worst = 0.0
    for o in kernel.outputs:
        try:
            c = compare(o, arrays[o], ref[o], working_dtype(kernel, o))
        except ArgusError as exc:  # a reference of the wrong shape
            tier.shapes.append(Tested(dims, False, note + exc.diagnostics[0].message, seconds))
            return True
        worst = max(worst, c.rel_error)
        if not c.ok and bad is None:
            bad = (o, c)
    if bad is None:
        tier.shapes.append(Tested(dims, True, f"{note}relative error {worst:.1e}", seconds))
    else:
        o, c = bad
        first = (o, *c.first_bad) if c.first_bad else None
        tier.shapes.append(Tested(dims, False, note + c.describe(), seconds, first))
    return True
