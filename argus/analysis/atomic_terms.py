"""The value an atomically accumulated element ends with, as a term the reference contract compares.

`atomic_add(T[view], v)` run by every block of the grid leaves element c of T holding

    T_in[c] + sum over the blocks b (and the add sites of the path) whose view covers c of v_b(c - start_b)

The executor explored one symbolic block; its add sites are re-evaluated here for a block b' of fresh
variables (every z3 expression of the term with the block ids renamed), and the sum over b' becomes a
reduction whose domain is "b' is in the grid, takes this path and its view covers c". A reduction in
the body (a block's partial sum over its rows) is merged with it, so the reference's single sum over
the rows (`T + sum(X, axis=0)`) meets one sum over (block, row) and the contract's multiplicity and
coverage obligations apply as they do to an mma's steps.
"""

from __future__ import annotations

import dataclasses

import z3

from argus.analysis import terms as T
from argus.analysis.symbolic import as_int


def substitute(t: T.Term, pairs: list) -> T.Term:
    """`t` with every z3 expression in it substituted (pairs of (variable, replacement)); shared sub-terms
    stay shared."""
    memo: dict[int, T.Term] = {}

    def z(x):
        if isinstance(x, z3.ExprRef):
            return z3.substitute(x, *pairs)
        return x

    def go(x):
        if x is None:
            return None
        got = memo.get(id(x))
        if got is not None:
            return got
        flags = {"zero": z(x.zero), "minf": z(x.minf), "uninit": z(x.uninit)}
        if isinstance(x, T.Atom):
            y = dataclasses.replace(x, coords=tuple(z(c) for c in x.coords), inside=z(x.inside), **flags)
        elif isinstance(x, T.Op):
            y = dataclasses.replace(x, args=tuple(go(a) for a in x.args), **flags)
        elif isinstance(x, T.Sel):
            y = dataclasses.replace(x, cond=z(x.cond), a=go(x.a), b=go(x.b), **flags)
        elif isinstance(x, T.Red):
            y = dataclasses.replace(x, vars=tuple(z(v) for v in x.vars), domain=z(x.domain), body=go(x.body), **flags)
        else:  # literals, opaque terms: nothing inside
            y = x
        memo[id(x)] = y
        return y
    return go(t)


def accumulated(out: str, coords: tuple, sites: list, ctx, tag: str) -> T.Term:
    """The final value of out[coords]: its input value plus, for every add site (a StoreEvent of the
    path), the sum over the blocks whose view covers coords of what they add there."""
    total: T.Term = T.atom(out, coords, True)
    chain = T.new_chain()  # every add is a summand of one accumulation (a term summed twice is a pair in it)
    for n, st in enumerate(sites):
        blk = tuple(z3.Int(f"ab{tag}_{n}_{d}") for d in range(len(ctx.block)))
        ren = list(zip(ctx.block, blk))
        # the site is evaluated at placeholder view indices, its block renamed, and only then are the
        # placeholders bound to where coords lies in block b's view (coords belong to the observing block)
        # (a view's tile axes are its sliced axes, in order or reversed when transposed; an axis indexed by
        # a scalar, Out[row, d0 : +BD], is no tile axis: coords must equal its start there)
        v = st.view
        starts = [z3.substitute(as_int(s), *ren) for s in v.starts]
        hold = tuple(z3.Int(f"al{tag}_{n}_{d}") for d in range(len(v.shape)))
        offsets = [as_int(c) - s for c, s, e in zip(coords, starts, v.extents) if e is not None]
        local = list(zip(hold, offsets[::-1] if v.transposed else offsets))
        fixed = [as_int(c) == s for c, s, e in zip(coords, starts, v.extents) if e is None]
        body = substitute(substitute(st.value.tags(hold).term, ren), local)
        in_grid = z3.And(*[z3.And(b >= 0, b < as_int(g)) for b, g in zip(blk, ctx.grid)])
        in_view = [c for i, e in zip(hold, v.shape) for c in (i >= 0, i < e)]
        inside = z3.substitute(z3.And(*in_view, T.zb(st.inside(hold))), *ren)
        # block b' ran its own assumes (t = load(row_token[b']); assume(0 <= t < T)): a valid launch
        # holds them at every block, so the sum ranges over blocks where they hold
        own = [z3.substitute(c, *ren) for c in block_assumes(ctx)]
        domain = z3.And(in_grid, z3.substitute(inside, *local), *fixed, *own)
        if isinstance(body, T.Red) and body.kind == "sum":  # a block's partial sum: one sum over (block, member)
            total = T.op("+", total, T.red("sum", blk + body.vars, z3.And(domain, T.zb(body.domain)), body.body,
                                           site=body.site, chain=chain))
        else:
            total = T.op("+", total, T.red("sum", blk, domain, body, chain=chain))
    return total


def block_assumes(ctx) -> list:
    """The path's assumes that read the block ids and nothing else the block does not share (dims,
    scalars, tensor contents): they hold at every block of the grid that takes this path."""
    from argus.analysis.solve import free_constants

    names = {str(b) for b in ctx.block}
    allowed = names | {str(v) for v in (*ctx.dims.values(), *ctx.scalars.values())}
    out = []
    for c in ctx.constraints:
        if c.get_id() in ctx.assumed:
            consts = free_constants(c)
            if consts & names and consts <= allowed:
                out.append(c)
    return out
