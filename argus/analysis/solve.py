"""Discharging obligations with Z3 and turning models into counterexamples."""

from __future__ import annotations

import dataclasses
import itertools
import time

import z3

from argus.analysis import sequences
from argus.analysis import terms as T
from argus.analysis.findings import UNKNOWN, VERIFIED, VIOLATED, Counterexample
from argus.analysis.solving import check_split, nonlinear_check
from argus.analysis.symbolic import Context, as_int, solver
from argus.analysis.trace import Obligation, Trace

SMALL = 512  # first look for counterexamples with every dim <= SMALL, so that replay is fast


def check_batch(trace: Trace, obligations: list[Obligation], ctx: Context, timeout_ms: int = 8000,
                refinements: int = 8) -> tuple[str, Obligation | None, z3.ModelRef | None]:
    """Verified if none of the obligations can be violated; else the first violated one and a model.

    Quantifier-free obligations share one query. An obligation whose `bad` over-approximates the
    violation (it has `refine`) is asked alone and confirmed on the model; a spurious model is
    excluded and the query repeated, at most `refinements` times, then the answer is unknown."""
    plain = [ob for ob in obligations if ob.refine is None and not ob.extra.get("nonlinear")
             and not ob.extra.get("fresh")]
    status = VERIFIED
    facts = contract_facts(ctx, [f for ob in obligations for f in (*ob.domain, ob.bad)])
    facts += sequence_axioms(ctx, [f for ob in obligations for f in (*ob.domain, ob.bad)])
    if plain:
        s = solver(timeout_ms)
        s.add(*trace.constraints, *facts)
        s.add(z3.Or(*[z3.And(*ob.domain, ob.bad) for ob in plain]))
        lemmas = None
        first = None
        for _ in range(CONTRACT_ROUNDS + 1):
            r, got = quick_then_split(s, timeout_ms)
            if r != z3.sat:
                break
            m = got.model()
            first = first or m
            if lemmas is None:
                lemmas = sequence_lemmas(ctx, [*facts, *[f for ob in plain for f in (*ob.domain, ob.bad)]])
            broken = [x for x in lemmas if z3.is_false(m.eval(x, model_completion=True))][:64]
            broken += contract_breaks(m, ctx)
            if not broken:
                return VIOLATED, _hit(plain, m), m
            # the model breaks the kernel's own contract where no instance was asked for: ask them too
            s.add(*broken)
        else:
            # still only contract-breaking models: the first one is a claim, violated only where replay
            # reproduces it on contents built from the whole contract
            hit = _hit(plain, first)
            return VIOLATED, dataclasses.replace(hit, extra={**hit.extra, "claim": True}), first
        if r == z3.unknown:
            status = UNKNOWN
    for ob in obligations:
        if ob.extra.get("nonlinear"):
            # ring positions multiply a tile index by the steps per tile
            r, m = nonlinear_check([*trace.constraints, *facts, *ob.domain, ob.bad], timeout_ms=timeout_ms)
            if r == z3.sat:
                return VIOLATED, ob, m
            if r == z3.unknown:
                status = UNKNOWN
            continue
        if ob.extra.get("fresh"):
            # quantified and exact: asked alone in a context of its own (see fresh_check)
            r, m = fresh_check([*trace.constraints, *facts, *ob.domain, ob.bad], timeout_ms)
            if r == z3.sat and not contract_breaks(m, ctx):
                return VIOLATED, ob, m
            if r != z3.unsat:
                status = UNKNOWN
            continue
        if ob.refine is None:
            continue
        s = solver(timeout_ms)
        s.add(*trace.constraints, *facts, *ob.domain, ob.bad)
        settled = False
        own = None
        spurious = 0
        for _ in range(refinements + CONTRACT_ROUNDS + 1):
            r, got = quick_then_split(s, timeout_ms)
            if r == z3.unsat:
                settled = True
                break
            if r == z3.unknown:
                break
            m = got.model()
            if own is None:
                own = sequence_lemmas(ctx, [*facts, *ob.domain, ob.bad])
            broken = [x for x in own if z3.is_false(m.eval(x, model_completion=True))][:64]
            broken += contract_breaks(m, ctx)
            if broken:  # a model outside the kernel's contract: rule it out and ask again
                s.add(*broken)
                continue
            block = ob.refine(m)
            if block is None:
                return VIOLATED, ob, m
            if block is False:
                break
            s.add(block)
            spurious += 1
            if spurious == EARLY_EXACT and ob.extra.get("exact") is not None:
                # excluding one coordinate per model rarely ends over unbounded dims: the exact
                # (quantified) question, briefly, before refining on
                r, _m = fresh_check([*trace.constraints, *facts, *ob.domain, ob.extra["exact"]],
                                    min(timeout_ms, 2000))
                if r == z3.unsat:
                    settled = True
                    break
        if settled:
            continue
        # the approximation keeps finding spurious models: ask the exact (quantified) question
        exact = ob.extra.get("exact")
        if exact is not None:
            r, m = fresh_check([*trace.constraints, *facts, *ob.domain, exact], timeout_ms)
            if r == z3.unsat:
                continue
            if r == z3.sat and ob.refine(m) is None and not contract_breaks(m, ctx):
                return VIOLATED, ob, m
        status = UNKNOWN
    return status, None, None


def fresh_check(formulas: list, timeout_ms: int) -> tuple[z3.CheckSatResult, z3.ModelRef | None]:
    """A quantified question asked in a context of its own (the model translated back). In the shared
    context Z3's quantifier instantiation depends on every term earlier queries created: the same exact
    footprint question of a segment sum was unsat in 0.02 s alone and unknown after 4 s in the shared
    context, depending on the order the obligations were solved in (in CI's workers, not here).

    Even alone, E-matching depends on the order the translated terms were created in: one query was
    unsat in 0.02 s read back from its SMT-LIB text and unknown at its whole budget translated (CI saw
    the segment sum unknown again). So a portfolio, each attempt deterministic: the default solver at
    the full budget, the preprocessed one briefly, then two other seeds; the first answer stands (the
    preprocessed one first cost a second on each of 56 queries the default one answers at once)."""
    home = z3.main_ctx()
    ctx = z3.Context()
    asked = [f.translate(ctx) for f in formulas]
    attempts = ((False, timeout_ms, 0), (True, min(timeout_ms, PREPROCESSED_MS), 0),
                (False, timeout_ms // 2, 1), (True, timeout_ms // 2, 2))
    r = z3.unknown
    for preprocess, ms, seed in attempts:
        s = solver(ms, ctx=ctx, preprocess=preprocess)
        if seed:
            s.set("random_seed", seed)
        s.add(*asked)
        r = s.check()
        if r == z3.sat:
            return r, s.model().translate(home)
        if r == z3.unsat:
            return r, None
    return r, None


def _hit(plain: list[Obligation], m: z3.ModelRef) -> Obligation:
    return next((ob for ob in plain if z3.is_true(m.eval(z3.And(*ob.domain, ob.bad), model_completion=True))),
                plain[0])


EARLY_EXACT = 3  # spurious models of an approximated query before its exact question is asked briefly
PREPROCESSED_MS = 1000  # the preprocessed attempt's budget: it answers in milliseconds or not at all


def quick_then_split(s: z3.Solver, timeout_ms: int) -> tuple[z3.CheckSatResult, z3.Solver]:
    """(answer, the solver that gave it) for the assertions of plain solver `s`: first a preprocessing
    solver (argus.analysis.symbolic.PREPROCESS: a store's footprint query with a reduction's existential,
    seconds for Z3's default pipeline, milliseconds after it), then, if that answers unknown, `s` itself
    through check_split with the whole budget (some division-heavy queries only the default pipeline and
    the bit-vector translation settle). A model is read from the solver returned."""
    pre = solver(min(PREPROCESSED_MS, timeout_ms), preprocess=True)
    pre.add(*s.assertions())
    r = pre.check()
    if r != z3.unknown:
        return r, pre
    return check_split(s, timeout_ms=timeout_ms), s


CONTRACT_POINTS = 64  # instances of each quantified assume at most, per batch
CONTRACT_ROUNDS = 8  # models refuted by contract instances before the answer is unknown
CONTRACT_SCAN = 1024  # a quantified assume is evaluated on a model at most this many indices


def contract_breaks(m: z3.ModelRef, ctx: Context, limit: int = 32) -> list:
    """Instances of the kernel's quantified assumes that model m makes false, at the indices its dims
    give (up to CONTRACT_SCAN): a counterexample must satisfy the contract everywhere, not only where
    contract_facts instantiated it (cu[141] <= cu[142] unasked lets a model pick cu[142] = 0)."""
    out: list = []
    for q in ctx.quantified:
        over = m.eval(as_int(q[1]), model_completion=True)
        if not z3.is_int_value(over):
            continue
        count = min(over.as_long(), CONTRACT_SCAN)
        if count <= 0:
            continue
        insts = [_instance(ctx, q, i) for i in range(count)]
        whole = ctx.instances.get((id(q), "all", count))
        if whole is None or whole[0] is not q:
            whole = ctx.instances[(id(q), "all", count)] = (q, z3.And(*insts))
        if not z3.is_false(m.eval(whole[1], model_completion=True)):
            continue  # one evaluation when the model keeps the contract (the common case)
        for inst in insts:
            if z3.is_false(m.eval(inst, model_completion=True)):
                out.append(inst)
                if len(out) >= limit:
                    return out
    return out + block_breaks(m, ctx, limit - len(out))


def block_breaks(m: z3.ModelRef, ctx: Context, limit: int = 32) -> list:
    """The kernel's per-block assumes (`t = load(row_token[r]); assume(0 <= t < T)`) at the other blocks of
    the model's grid, where m makes one false: every block of a valid launch runs its assumes, so a
    counterexample whose row_token[0] = -1 breaks block 0's contract, whichever block it is about. An
    instance is Implies(this path's block-dependent conditions at block b, the assume at b): a block
    taking another path may not run the assume. Assumes or conditions over anything but the block ids,
    dims, scalars and tensor contents (a loop's fresh variables) are left out."""
    blocks = list(ctx.block[: len(ctx.grid)])
    if not blocks or not ctx.assumed:
        return []
    names = {str(b) for b in blocks}
    allowed = names | {str(v) for v in (*ctx.dims.values(), *ctx.scalars.values())}
    conds, assumes = [], []
    for c in ctx.constraints:
        consts = free_constants(c)
        if not consts & names:
            continue
        if not consts <= allowed:
            if c.get_id() in ctx.assumed:
                continue  # an assume over fresh variables: not instantiated
            return []  # a path condition over them: this path cannot be stated at another block
        (assumes if c.get_id() in ctx.assumed else conds).append(c)
    if not assumes:
        return []
    sizes = [m.eval(as_int(g), model_completion=True) for g in ctx.grid]
    if not all(z3.is_int_value(v) for v in sizes):
        return []
    out: list = []
    for n, at in enumerate(itertools.product(*[range(max(0, v.as_long())) for v in sizes])):
        if n >= CONTRACT_SCAN:
            break
        sub = [(b, z3.IntVal(x)) for b, x in zip(blocks, at)]
        guard = z3.substitute(z3.And(*conds), *sub) if conds else z3.BoolVal(True)
        for a in assumes:
            inst = z3.Implies(guard, z3.substitute(a, *sub))
            if z3.is_false(m.eval(inst, model_completion=True)):
                out.append(inst)
                if len(out) >= limit:
                    return out
    return out


def free_constants(f) -> set[str]:
    out: set[str] = set()
    todo, seen = [f], set()
    while todo:
        x = todo.pop()
        if x.get_id() in seen:
            continue
        seen.add(x.get_id())
        if z3.is_const(x) and x.decl().kind() == z3.Z3_OP_UNINTERPRETED:
            out.add(x.decl().name())
        todo.extend(x.children())
    return out


def _instance(ctx: Context, q, i: int):
    got = ctx.instances.get((id(q), i))
    if got is None or got[0] is not q:  # keyed by identity: contexts of other paths may share the dict
        got = ctx.instances[(id(q), i)] = (q, ctx.instantiate(q, z3.IntVal(i)))
    return got[1]


def contract_facts(ctx: Context, formulas: list) -> list:
    """The kernel's quantified assumes (`assume(lambda r: ..., over=N)`, a contract over tensor contents)
    instantiated at every index the obligations read a 1-D tensor at: `0 <= idx[r] < T` at the rows a
    gather reads. Each instance is a consequence of the stated contract (guarded by 0 <= v < N), so
    adding them only removes models the contract rules out; never a quantifier."""
    if not ctx.quantified:
        return []
    fns = {f.name() for f in ctx.functions.values()}
    args: list = []
    seen: set = set()
    todo = [f for f in formulas if isinstance(f, z3.ExprRef)]
    while todo and len(args) < CONTRACT_POINTS:
        x = todo.pop()
        if x.get_id() in seen:
            continue
        seen.add(x.get_id())
        if z3.is_app(x) and x.decl().name() in fns and x.num_args() == 1 and x.arg(0).sort() == z3.IntSort():
            if not any(x.arg(0).eq(a) for a in args):
                args.append(x.arg(0))
        todo.extend(x.children())
    return [ctx.instantiate(q, a) for q in ctx.quantified for a in args]


def sequence_lemmas(ctx: Context, formulas: list) -> list:
    """Candidate facts about offsets the contract keeps in order (cu[i] <= cu[i + 1]): a reference's
    segment of a row holds the row, and any two reads are ordered (argus.analysis.sequences). Asked
    lazily: only the instances a model breaks are added (all of them at once make some queries slow)."""
    mono = sequences.monotone(ctx, {str(b) for b in ctx.block})
    if not mono:
        return []
    every = z3.And(*[f for f in formulas if isinstance(f, z3.ExprRef)])
    seg = sequences.segment_lemmas(every, ctx.segments, mono)
    return seg + sequences.order_lemmas(z3.And(every, *seg), mono)


def sequence_axioms(ctx: Context, formulas: list) -> list:
    """The segment and order facts as quantified axioms with triggers, for queries where a reference's
    expert_of_rows is applied under a quantifier (a footprint's "some summed index uses this element"):
    there no ground instance reaches the bound index, and E-matching instantiates them per term."""
    if not ctx.segments:
        return []
    every = z3.And(*[f for f in formulas if isinstance(f, z3.ExprRef)])
    used = {n for n in ctx.segments if T.applied_names(every, {n})}
    if not used:
        return []
    mono = sequences.monotone(ctx, {str(b) for b in ctx.block})
    out = []
    for name in sorted(used):
        got = mono.get(ctx.segments[name])
        if got is None:
            continue
        f, over = got
        n = as_int(over)
        seg = z3.Function(name, z3.IntSort(), z3.IntSort())
        x, p, q = z3.Int("_sq_x"), z3.Int("_sq_p"), z3.Int("_sq_q")
        out.append(z3.ForAll([x], z3.Implies(z3.And(f(0) <= x, x < f(n)),
                                             z3.And(seg(x) >= 0, seg(x) < n, f(seg(x)) <= x, x < f(seg(x) + 1))),
                             patterns=[seg(x)]))
        out.append(z3.ForAll([p, q], z3.Implies(z3.And(p >= 0, p <= q, q <= n), f(p) <= f(q)),
                             patterns=[z3.MultiPattern(f(p), f(q))]))
    return out


def presolve(batches: list) -> list:
    """Each batch's verdict (status, seconds), solved in forked children side by side when this machine
    has more than one core and there is enough to share; None where a batch was not presolved. The
    children only answer a status: a violation is solved again here for its model. os.fork, not
    multiprocessing: `argus check` itself runs in a daemonic child, which multiprocessing forbids to
    have children. ARGUS_VERIFY_JOBS=1 turns it off."""
    import os
    import pickle
    import threading

    jobs = _jobs()
    out: list = [None] * len(batches)
    # a fork while another thread runs (a caller's own threads) could copy a lock held mid-operation
    if jobs < 2 or len(batches) < 8 or not hasattr(os, "fork") or threading.active_count() > 1:
        return out
    parts = [list(range(i, len(batches), jobs)) for i in range(jobs)]
    kids = []  # (pid, read end, part)
    try:
        for part in parts:
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: solve, answer, leave without running the parent's cleanup
                code = 0
                try:
                    os.close(r)
                    res = []
                    for i in part:
                        trace, group, ctx = batches[i]
                        t = time.perf_counter()
                        st, _ob, _m = check_batch(trace, group, ctx)
                        res.append((st, time.perf_counter() - t))
                    data = pickle.dumps(res)
                    view = memoryview(data)
                    while view:
                        view = view[os.write(w, view):]
                except BaseException:
                    code = 1
                finally:
                    os._exit(code)
            os.close(w)
            kids.append((pid, r, part))
    except OSError:
        pass  # no more children: what was not started is solved here
    for pid, r, part in kids:
        chunks = []
        try:
            while True:
                chunk = os.read(r, 1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
        finally:
            os.close(r)
            os.waitpid(pid, 0)
        try:
            got = pickle.loads(b"".join(chunks))
        except Exception:
            continue  # a child that died: its batches are solved here
        for i, v in zip(part, got):
            out[i] = v
    return out


def _jobs() -> int:
    import os

    want = os.environ.get("ARGUS_VERIFY_JOBS")
    if want is not None:
        try:
            return max(1, int(want))
        except ValueError:
            return 1
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return min(cores, 8)


def small_model(trace: Trace, formula, ctx: Context, timeout_ms: int = 8000,
                contract: bool = False) -> z3.ModelRef | None:
    """A model of `formula` under the trace's constraints, with small dims when possible. `contract`: also
    under the kernel's quantified assumes at the indices the formula reads, so that the index values shown
    are ones the contract allows (an out-of-bounds gather: idx[0] = T, not a negative index the contract
    rules out). Data-flow checks leave it off: their replay picks its own contract-satisfying inputs, and
    a model pinned to the contract can land on a block whose replay another bug stops first."""
    s = solver(timeout_ms)
    s.add(*trace.constraints, *(contract_facts(ctx, [formula]) if contract else ()), formula)
    small = [d <= SMALL for d in ctx.dims.values()]
    if small and s.check(*small) == z3.sat:
        return s.model()
    if s.check() == z3.sat:
        return s.model()
    return None


def shrunk_model(trace: Trace, formula, ctx: Context, m: z3.ModelRef, too_large) -> z3.ModelRef:
    """`m` with its dims shrunk one at a time (largest first: to 8, else to half; the others held at
    most their values) while `formula` holds, until `too_large(dims)` is false: a claim is settled by
    replay, which cannot run B = H = 512."""
    s = solver(2000)
    s.add(*trace.constraints, formula)
    for _round in range(3):
        cur = {k: _int(m, v) for k, v in ctx.dims.items()}
        if not too_large(cur):
            break
        for name, d in sorted(ctx.dims.items(), key=lambda kv: -cur[kv[0]]):
            if not too_large(cur):
                break
            held = [x <= cur[k] for k, x in ctx.dims.items() if k != name and cur[k] > 0]
            for cap in (8, cur[name] // 2):
                if 1 <= cap < cur[name] and s.check(*held, d <= cap) == z3.sat:
                    m = s.model()
                    cur = {k: _int(m, v) for k, v in ctx.dims.items()}
                    break
    return m


def _int(m: z3.ModelRef, t) -> int:
    v = value(m, t)
    return v if isinstance(v, int) else 0


def value(m: z3.ModelRef, t) -> object:
    if isinstance(t, (int, bool)):
        return t
    v = m.eval(t, model_completion=True)
    if z3.is_int_value(v):
        return v.as_long()
    if z3.is_true(v):
        return True
    if z3.is_false(v):
        return False
    if z3.is_rational_value(v):
        return float(v.as_fraction())
    return str(v)


def counterexample(m: z3.ModelRef, ctx: Context, ob: Obligation) -> Counterexample:
    cx = Counterexample()
    cx.dims = {d: value(m, v) for d, v in ctx.dims.items()}
    cx.block = tuple(value(m, b) for b in ctx.block[: len(ctx.kernel.grid)])
    cx.steps = {k: value(m, v) for k, v in ob.step.items()}
    cx.values = {k: value(m, v) for k, v in ob.variables.items()}
    cx.sides = {label: {f: value(m, t) for f, t in fields.items()} for label, fields in ob.sides.items()}
    cx.values.update(tensor_values(m, ctx))
    # integer scalar arguments the model constrains (a bound n_valid, an offset): the replay runs with them
    chosen = {d.name() for d in m.decls()}
    cx.scalars = {n: value(m, v) for n, v in ctx.scalars.items() if z3.is_int(v) and n in chosen}
    return cx


def tensor_values(m: z3.ModelRef, ctx: Context, limit: int = 16) -> dict[str, object]:
    """The tensor contents Z3 chose for the scalar loads met (routing metadata: offs[1] = 3)."""
    out: dict[str, object] = {}
    for term in ctx.applications:
        args = [value(m, a) for a in term.children()]
        if not all(isinstance(a, int) for a in args):
            continue
        label = f"{term.decl().name()}[{', '.join(map(str, args))}]"
        if label not in out:
            out[label] = value(m, term)
        if len(out) >= limit:
            break
    return out


def obligation_counterexample(trace: Trace, ob: Obligation, ctx: Context) -> Counterexample | None:
    m = small_model(trace, z3.And(*ob.domain, ob.bad), ctx)
    return None if m is None else counterexample(m, ctx, ob)
