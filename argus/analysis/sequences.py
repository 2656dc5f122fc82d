"""Two lemmas about integer sequences read from a 1-D tensor, for coverage over offsets such as
`cu_seqlens` (a block per sequence writes rows cu[b] .. cu[b + 1]): both are true of every sequence the
kernel's contract admits, so adding their instances to a query keeps unsat a proof.

- **order**: a quantified assume that makes f non-decreasing step by step
  (`assume(lambda i: load(cu[i]) <= load(cu[i + 1]), over=N)`) makes it non-decreasing on 0..N, so
  p <= q implies f(p) <= f(q) for any two reads of f a query makes. The verifier never hands Z3 the
  quantifier; the per-step instances do not give the transitive order, which "written twice" needs
  (rows of sequence b1 end where those of a later b2 start).
- **segment**: for any f and x with f(0) <= x < f(n - 1) there is a w in [0, n - 1) with
  f(w) <= x < f(w + 1) (the last w with f(w) <= x). "Unwritten" takes w as the block whose segment
  holds output row x: the witness a contract would otherwise have to name (MoE's row_tile).
"""

from __future__ import annotations

import itertools

import z3

from argus.analysis import terms as T
from argus.analysis.symbolic import SOLVER_TIMEOUT_MS, as_int, solver


def _sequences(ctx) -> dict[str, tuple[z3.FuncDeclRef, object]]:
    """1-D integer tensor functions of the context, with their length (a z3 term)."""
    out = {}
    for name, fn in ctx.functions.items():
        if fn.arity() != 1 or fn.range() != z3.IntSort():
            continue
        decl = next((t for t in ctx.kernel.tensors if t.name == name), None)
        if decl is None or len(decl.dims) != 1:
            continue
        d = decl.dims[0]
        out[name] = (fn, as_int(d) if isinstance(d, int) else ctx.dims[d])
    return out


def monotone(ctx, block_names: set[str]) -> dict[str, tuple[z3.FuncDeclRef, object]]:
    """Sequences some block-independent quantified assume makes non-decreasing over the whole tensor:
    name -> (f, N) with f(i) <= f(i + 1) for 0 <= i < N, N its length - 1."""
    key = (len(ctx.quantified), tuple(sorted(ctx.functions)), tuple(sorted(block_names)))
    cached = getattr(ctx, "_monotone", None)
    if cached is not None and cached[0] == key:
        return cached[1]
    out = _monotone(ctx, block_names)
    try:
        ctx._monotone = (key, out)  # asked once per obligation batch: solved once per context
    except (AttributeError, TypeError):
        pass
    return out


def _monotone(ctx, block_names: set[str]) -> dict[str, tuple[z3.FuncDeclRef, object]]:
    seqs = _sequences(ctx)
    out: dict[str, tuple[z3.FuncDeclRef, object]] = {}
    if not seqs or not ctx.quantified:
        return out
    i = z3.Int("_seq_i")
    base = [c for c in ctx.constraints if isinstance(c, z3.ExprRef) and not T.mentions(c, block_names)]
    for q in ctx.quantified:
        over = as_int(q[1])
        if T.mentions(over, block_names):
            continue
        body = ctx.instantiate(q, i)
        if T.mentions(body, block_names):
            continue
        for name, (fn, n) in seqs.items():
            if name in out:
                continue
            # over the whole tensor only: searchsorted (a reference's expert_of_rows) reads every entry
            if not _equal(as_int(over), as_int(n) - 1, base):
                continue
            s = solver(SOLVER_TIMEOUT_MS)
            s.add(i >= 0, i < over, body, z3.Not(fn(i) <= fn(i + 1)))
            if s.check() == z3.unsat:
                out[name] = (fn, over)
    return out


def _apps(formula, keep) -> list:
    """The distinct one-argument applications in formula that `keep(app)` accepts."""
    found: list = []
    seen: set[int] = set()
    todo = [formula]
    while todo:
        x = todo.pop()
        if x.get_id() in seen:
            continue
        seen.add(x.get_id())
        if z3.is_app(x) and x.num_args() == 1 and keep(x) and not any(x.eq(y) for y in found):
            found.append(x)
        todo.extend(x.children())
    return found


def _equal(a, b, base: list) -> bool:
    """a == b for every execution the kernel's block-independent constraints admit (S1 == NS + 1)."""
    if z3.is_true(z3.simplify(a == b)):
        return True
    s = solver(SOLVER_TIMEOUT_MS)
    s.add(*base, a != b)
    return s.check() == z3.unsat


def reads_of(formula, fn: z3.FuncDeclRef) -> list:
    """The distinct applications of fn in formula."""
    return _apps(formula, lambda x: x.decl() == fn)


def order_lemmas(formula, mono: dict, limit: int = 24) -> list:
    """p <= q -> f(p) <= f(q) for the pairs of reads of each monotone f in formula (0 <= p, q <= N)."""
    out = []
    for fn, over in mono.values():
        reads = reads_of(formula, fn)[:limit]
        for a, b in itertools.permutations(reads, 2):
            p, q = a.arg(0), b.arg(0)
            out.append(z3.Implies(z3.And(p >= 0, p <= q, q <= as_int(over)), a <= b))
    return out


def segment_lemmas(formula, segments: dict[str, str], mono: dict) -> list:
    """For each application seg(x) in formula of a reference's expert_of_rows over monotone offsets f
    (segments: function name -> tensor name): f(0) <= x < f(N) implies 0 <= seg(x) < N and
    f(seg(x)) <= x < f(seg(x) + 1) -- what np.searchsorted(f, x, side="right") - 1 is for sorted f."""
    out = []
    if not segments:
        return out
    for x in _apps(formula, lambda x: x.decl().name() in segments):
        got = mono.get(segments[x.decl().name()])
        if got is not None:
            f, over = got
            r = x.arg(0)
            out.append(z3.Implies(z3.And(f(0) <= r, r < f(as_int(over))),
                                  z3.And(x >= 0, x < as_int(over), f(x) <= r, r < f(x + 1))))
    return out


def segment_witness(ctx, name: str, x, tag: str):
    """(w, lemma): w a fresh block index, lemma f(0) <= x < f(n - 1) -> 0 <= w < n - 1 and
    f(w) <= x < f(w + 1); None when `name` is not a 1-D integer tensor."""
    seqs = _sequences(ctx)
    if name not in seqs:
        return None
    fn, n = seqs[name]
    w = z3.Int(f"_seg_{name}_{tag}")
    lemma = z3.Implies(z3.And(fn(0) <= x, x < fn(n - 1)),
                       z3.And(w >= 0, w < n - 1, fn(w) <= x, x < fn(w + 1)))
    return w, lemma


def direct_reads(e, block) -> list[str]:
    """Tensor functions read at exactly `block` (f(b)) in e, when every occurrence of the block id in e
    is such a read or f(b + k) for a constant k; [] otherwise."""
    names: list[str] = []
    ok = True

    def visit(x) -> None:
        nonlocal ok
        if z3.is_app(x) and x.num_args() == 1 and x.decl().kind() == z3.Z3_OP_UNINTERPRETED:
            arg = x.arg(0)
            if arg.eq(block):
                if x.decl().name() not in names:
                    names.append(x.decl().name())
                return
            off = z3.simplify(arg - block)
            if z3.is_int_value(off):
                return
        if z3.is_const(x) and x.eq(block):
            ok = False
            return
        for y in x.children():
            visit(y)

    visit(e)
    return names if ok else []
