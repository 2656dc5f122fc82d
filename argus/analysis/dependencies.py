"""Dependency predicates: "element t depends on tensor[c]" as a z3 formula over c.

`exact(t, T, P)` is the predicate over canonical coordinate variables `c` (one per axis of T; only the
positions in P are compared): true iff some live path of t reaches an atom T[x] with x[p] == c[p] for
p in P. Reductions quantify their bound variables existentially. Built bottom-up and memoised per term
node, so shared sub-terms (a running max used by every later step) cost one formula, not one per path.

`under(t, T, P)` is a quantifier-free under-approximation: each reduction's existential is replaced
by a disjunction over candidate members, solved from the coordinate equations of the atoms below it
(argus.analysis.solving). A query "kernel depends on c and the reference does not" is first asked
with `under` for the reference (sound: unsatisfiable there means unsatisfiable with `exact`); a model
is then confirmed against `exact` with every free variable fixed (argus.analysis.footprint).
"""

from __future__ import annotations

import z3

from argus.analysis import terms as T
from argus.analysis.solving import linear, solve

UNWRITTEN = "<unwritten>"  # pseudo-tensor: shared memory no copy wrote


class Dependencies:
    def __init__(self, cvars: dict[str, tuple]):
        self.cvars = cvars  # tensor -> canonical coordinate variables
        self._exact: dict = {}
        self._under: dict = {}

    # ---- exact ----
    def exact(self, t: T.Term, tensor: str, positions: frozenset, skip: frozenset = frozenset()) -> object:
        """`skip`: atoms (by id) that count as not reading `tensor` (a reduction's pinned members, whose
        part of the existential is already written out)."""
        key = (id(t), tensor, positions, skip)
        hit = self._exact.get(key)
        if hit is not None:
            return hit[0]
        out = self._exact_node(t, tensor, positions, skip)
        self._exact[key] = (out, t)
        return out

    def _exact_node(self, t: T.Term, tensor: str, positions: frozenset, skip: frozenset = frozenset()):
        if isinstance(t, T.Atom):
            if t.tensor != tensor or id(t) in skip:
                return False
            c = self.cvars[tensor]
            return T.b_and(t.live, t.inside, *[t.coords[p] == c[p] for p in sorted(positions)])
        if isinstance(t, T.Lit):
            return T.b_and(t.uninit, t.live) if tensor == UNWRITTEN else False
        if isinstance(t, T.Op):
            return T.b_and(t.live, T.b_or(*[self.exact(a, tensor, positions, skip) for a in t.args]))
        if isinstance(t, T.Sel):
            return T.b_and(t.live, T.b_or(T.b_and(t.cond, self.exact(t.a, tensor, positions, skip)),
                                          T.b_and(T.b_not(t.cond), self.exact(t.b, tensor, positions, skip))))
        if isinstance(t, T.Red):
            inner = T.b_and(t.domain, self.exact(t.body, tensor, positions, skip))
            if inner is False or not t.vars:
                return T.b_and(t.live, inner)
            if isinstance(inner, bool):
                inner = T.zb(inner)
            members, pinned = self._pinned_members(t, tensor, positions, skip)
            if not members:
                return T.b_and(t.live, z3.Exists(list(t.vars), inner))
            # the body holds through a pinned atom only at that atom's member; through any other atom
            # for some member (the predicate is monotone in its atoms: setting the pinned ones false
            # leaves exactly the other paths)
            parts = [z3.substitute(inner, *m) for m in members]
            rest = T.b_and(t.domain, self.exact(t.body, tensor, positions, skip | pinned))
            if rest is not False:
                parts.append(z3.Exists(list(t.vars), T.zb(rest)) if not isinstance(rest, bool) else T.zb(rest))
            return T.b_and(t.live, T.b_or(*parts))
        if isinstance(t, T.Opaque):
            raise T.OpaqueTerm(t)
        raise TypeError(type(t).__name__)

    def _pinned_members(self, r: T.Red, tensor: str, positions: frozenset, skip: frozenset) -> tuple[list, frozenset]:
        """The reduction's existential written out where it can be, exactly: every way r's body depends
        on tensor[c] goes through an atom whose predicate includes coords[p] == c[p], so an atom whose
        coordinates are unit-coefficient linear in r's variables and pin all of them is reached by one
        member only (the one its equations solve to). Returns the substitutions of those members and the
        atoms they pin; the other atoms keep the quantifier. (Z3 eliminates a range of 2048 columns as
        2048 disjuncts.)"""
        if tensor == UNWRITTEN:
            return [], frozenset()
        c = self.cvars[tensor]
        nested = _bound_below(r.body)
        out, seen, pinned = [], set(), set()
        for atom in _atoms(r.body, tensor):
            if id(atom) in skip:
                continue
            eqs = [(T.zi(atom.coords[p]), c[p]) for p in sorted(positions)]
            if any(T.mentions(x, nested) for x, _ in eqs):
                continue
            sol: dict = {}
            progress, ok = True, True
            while ok and progress and len(sol) < len(r.vars):
                progress = False
                for lhs, rhs in eqs:
                    lhs = z3.substitute(lhs, *sol.items()) if sol else lhs
                    free = [v for v in r.vars if v not in sol and T.mentions(lhs, {v.decl().name()})]
                    if len(free) != 1:
                        continue
                    lin = linear(lhs, free[0])
                    if lin is None or lin[1] not in (1, -1):
                        ok = False
                        break
                    sol[free[0]] = z3.simplify((rhs - lin[0]) * lin[1])
                    progress = True
            if not ok or len(sol) < len(r.vars):
                continue
            pinned.add(id(atom))
            key = tuple(z3.simplify(sol[v]).get_id() for v in r.vars)
            if key not in seen:
                seen.add(key)
                out.append([(v, sol[v]) for v in r.vars])
        return out, frozenset(pinned)

    # ---- quantifier-free under-approximation ----
    def under(self, t: T.Term, tensor: str, positions: frozenset, hints: tuple = ()) -> object:
        """`hints`: coordinate tuples where the other side of a comparison reads `tensor` (free of
        its bound variables): candidates are also unified with them (pos(t, k) against pos(t, 3))."""
        key = (id(t), tensor, positions, tuple(tuple(z3.simplify(T.zi(c)).get_id() for c in h) for h in hints))
        hit = self._under.get(key)
        if hit is not None:
            return hit[0]
        out = self._under_node(t, tensor, positions, hints)
        self._under[key] = (out, t)
        return out

    def _under_node(self, t: T.Term, tensor: str, positions: frozenset, hints: tuple):
        if isinstance(t, (T.Atom, T.Lit, T.Opaque)):
            return self._exact_node(t, tensor, positions)
        if isinstance(t, T.Op):
            return T.b_and(t.live, T.b_or(*[self.under(a, tensor, positions, hints) for a in t.args]))
        if isinstance(t, T.Sel):
            return T.b_and(t.live, T.b_or(T.b_and(t.cond, self.under(t.a, tensor, positions, hints)),
                                          T.b_and(T.b_not(t.cond), self.under(t.b, tensor, positions, hints))))
        if isinstance(t, T.Red):
            inner = T.b_and(t.domain, self.under(t.body, tensor, positions, hints))
            if inner is False or not t.vars:
                return T.b_and(t.live, inner)
            inner = T.zb(inner)
            options = []
            for cand in self.candidates(t, tensor, positions, hints):
                options.append(z3.substitute(inner, *[(v, cand[v]) for v in t.vars]))
            return T.b_and(t.live, T.b_or(*options)) if options else False
        raise TypeError(type(t).__name__)

    def candidates(self, r: T.Red, tensor: str, positions: frozenset, hints: tuple = ()) -> list[dict]:
        """Members of r that may depend on tensor[c]: solved from the coordinates of the atoms of
        `tensor` below r (against c, and against each hint); variables no coordinate pins down take 0
        (the first member)."""
        c = self.cvars[tensor]
        names = {v.decl().name() for v in r.vars}
        nested = _bound_below(r.body)
        out, seen = [], set()
        targets = [tuple(c)] + [tuple(h) for h in hints]
        for atom, target in [(a, tg) for a in _atoms(r.body, tensor) for tg in targets]:
            eqs = [(atom.coords[p], target[p]) for p in sorted(positions) if T.mentions(atom.coords[p], names)]
            sol = solve(eqs, r.vars) if eqs else None
            if sol is None:
                sol = {}
                for lhs, rhs in eqs:
                    part = solve([(lhs, rhs)], tuple(v for v in r.vars if T.mentions(lhs, {v.decl().name()})))
                    if part:
                        sol.update({k: v for k, v in part.items() if k not in sol})
            cand = {v: sol.get(v, z3.IntVal(0)) for v in r.vars}
            if any(T.mentions(x, nested) for x in cand.values()):
                continue  # a nested reduction's variable is substituted away below: no use here
            k = tuple(z3.simplify(x).get_id() for x in cand.values())
            if k not in seen:
                seen.add(k)
                out.append(cand)
        if not out and tensor == UNWRITTEN:
            out.append({v: z3.IntVal(0) for v in r.vars})
        return out


def _atoms(t: T.Term, tensor: str) -> list[T.Atom]:
    out, todo, seen = [], [t], set()
    while todo:
        x = todo.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, T.Atom):
            if x.tensor == tensor:
                out.append(x)
        elif isinstance(x, T.Op):
            todo.extend(x.args)
        elif isinstance(x, T.Sel):
            todo.extend((x.a, x.b))
        elif isinstance(x, T.Red):
            todo.append(x.body)
    return out


_BOUND: dict = {}  # id(term) -> (names, term): kept alive so that the id is not reused


def _bound_below(t: T.Term) -> set[str]:
    hit = _BOUND.get(id(t))
    if hit is not None:
        return hit[0]
    if len(_BOUND) > 100_000:
        _BOUND.clear()
    out = _bound_below_walk(t)
    _BOUND[id(t)] = (out, t)
    return out


def _bound_below_walk(t: T.Term) -> set[str]:
    out, todo, seen = set(), [t], set()
    while todo:
        x = todo.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, T.Red):
            out.update(v.decl().name() for v in x.vars)
            todo.append(x.body)
        elif isinstance(x, T.Op):
            todo.extend(x.args)
        elif isinstance(x, T.Sel):
            todo.extend((x.a, x.b))
    return out


def tensors_of(t: T.Term) -> set[str]:
    """Every tensor an element may depend on (ignoring guards), with UNWRITTEN for unwritten shared memory."""
    out, todo, seen = set(), [t], set()
    while todo:
        x = todo.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, T.Atom):
            out.add(x.tensor)
        elif isinstance(x, T.Lit) and x.kind == "uninit":
            out.add(UNWRITTEN)
        elif isinstance(x, T.Op):
            todo.extend(x.args)
        elif isinstance(x, T.Sel):
            todo.extend((x.a, x.b))
        elif isinstance(x, T.Red):
            todo.append(x.body)
        elif isinstance(x, T.Opaque):
            raise T.OpaqueTerm(x)
    return out
