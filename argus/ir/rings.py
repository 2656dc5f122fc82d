"""The structure of a warp-specialised producer/consumer ring (which roles, barriers, buffers and loops),
read by the verifier (argus/analysis/ring.py proves its protocol) and the code generator
(argus/codegen/release_lag.py defers the consumer's stage releases). Structural only: no solver.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from argus.dsl.types import I32, ScalarT
from argus.ir import nodes as ir
from argus.ir.transform import walk

MBAR_OPS = (ir.WaitBarrier, ir.Arrive, ir.ExpectTx)


@dataclass
class RingPlan:
    producer: ir.Role
    consumer: ir.Role
    full: str  # completed by the producer's expect_tx and its bulk copies
    empty: str  # completed by the consumer's releases
    stages: int
    buffers: frozenset[str]  # written by the producer's bulk copies
    persistent: bool  # the step loops sit inside a persistent tile loop
    problems: list = field(default_factory=list)  # (code, span, message): static protocol errors
    # 1 when the consumer's step q releases the stage of step q - 1 (FlashAttention-3's order: the P·V of
    # block q - 1 is issued after the QK of block q) and its code after the loop releases the last one
    lag: int = 0
    post_release: ir.Arrive | None = None  # that release after the loop
    # the top-level `if` (no else) the tail sits in, when it has one: `if n_kv > 0:` -- a causal block past
    # every key runs no step and holds no stage. The verifier explores its condition as any branch (a path
    # that ran steps and skips the tail keeps its last stage: the "never releases" obligation)
    post_guard: ir.If | None = None
    # a second ring at tile granularity (persistent nests only): the producer fills `buffers` once per
    # tile before its steps (a TMA load of the tile's Q), the consumer waits for it before its steps and
    # releases it after them; its position is the block's tile count instead of its step count
    tile: RingPlan | None = None


def split(body: tuple[ir.Stmt, ...]) -> tuple[tuple, ir.For | None, tuple] | None:
    loops = [i for i, s in enumerate(body) if isinstance(s, ir.For)]
    if len(loops) != 1:
        return None
    i = loops[0]
    return body[:i], body[i], body[i + 1:]


def role_nest(role: ir.Role):
    """(pre, tile loop | None, tile pre, step loop, tile post, post) of a role, or None."""
    top = split(role.body)
    if top is None:
        return None
    pre, loop, post = top
    if loop.kind == "persistent":
        if not any(isinstance(s, ir.For) for s in walk(loop.body)):
            # a persistent loop whose tile is one ring step (a row block of a norm): the tile's body is the
            # step, seen as a one-trip step loop so the ring's position is the block's tile count
            return pre, loop, (), _one_step(loop), (), post
        inner = split(loop.body)
        if inner is None or inner[1].kind == "persistent":
            return None
        return pre, loop, inner[0], inner[1], inner[2], post
    return pre, None, (), loop, (), post


_ONE_STEP: dict[int, tuple[ir.For, ir.For]] = {}  # by the tile loop's id; the loop kept so its id stays its own


def _one_step(loop: ir.For) -> ir.For:
    """The one-trip step loop around a persistent tile's body; the same node for the same tile loop, so the
    code generator's and the verifier's tables keyed by a step loop's id agree."""
    hit = _ONE_STEP.get(id(loop))
    if hit is None or hit[0] is not loop:
        if len(_ONE_STEP) >= 4096:  # bounded (a long tune run): a dropped entry only gets a new node next time
            _ONE_STEP.clear()
        one = ir.Const(ScalarT(I32, True), loop.span, 1)
        zero = ir.Const(ScalarT(I32, True), loop.span, 0)
        hit = (loop, ir.For(span=loop.span, var=f"{loop.var}#step", start=zero, stop=one, step=one,
                            body=loop.body, kind="serial"))
        _ONE_STEP[id(loop)] = hit
    return hit[1]


def _after(post: tuple, release: ir.Arrive, guard: ir.If | None) -> tuple:
    """The consumer's statements after its last release (in the guard, then after it)."""
    if guard is None:
        return post[post.index(release) + 1:]
    return guard.then[guard.then.index(release) + 1:] + post[post.index(guard) + 1:]


def ring_plan(roles: tuple[ir.Role, ...], barriers: dict[str, ir.AllocBarrier]) -> RingPlan | str:
    """The ring of a producer/consumer role pair, or the reason the roles are not one."""
    kinds = sorted(r.kind for r in roles)
    if kinds != ["consumer", "producer"]:
        return "the roles are not one producer and one consumer"
    prod = next(r for r in roles if r.kind == "producer")
    cons = next(r for r in roles if r.kind == "consumer")
    np_, nc = role_nest(prod), role_nest(cons)
    if np_ is None or nc is None:
        return "a role is not a single loop nest (optionally inside one persistent tile loop)"
    if (np_[1] is None) != (nc[1] is None):
        return "one role runs a persistent tile loop and the other does not"
    pstep, cstep = np_[3], nc[3]
    copies = [s for s in walk(pstep.body) if isinstance(s, ir.Copy) and s.mode == "bulk"]
    if not copies or any(c.barrier is None for c in copies):
        return "the producer's step issues no bulk copies completing on an mbarrier"
    fulls = {c.barrier.name for c in copies}
    if len(fulls) != 1:
        return "the producer's copies complete on different mbarriers"
    full = fulls.pop()
    pwaits = [s for s in walk(pstep.body) if isinstance(s, ir.WaitBarrier)]
    if len(pwaits) != 1:
        return "the producer's step does not wait exactly once"
    empty = pwaits[0].barrier.name
    if empty == full or full not in barriers or empty not in barriers:
        return "the producer waits on the barrier its copies complete"
    lag, post_release, post_guard = 0, None, None
    ring_ops = [s for s in walk(nc[5]) if isinstance(s, MBAR_OPS) and s.barrier.name in (full, empty)]
    if ring_ops:
        # the consumer holds two stages at a time: step q reads stages q and q - 1 and releases q - 1;
        # the last step's stage is read and released after the loop (one top-level arrive there)
        def releases(body) -> list:
            return [s for s in body if isinstance(s, ir.Arrive) and s.barrier.name == empty]

        tops = releases(nc[5])
        guards = [s for s in nc[5] if isinstance(s, ir.If) and not s.orelse and releases(s.then)]
        if not tops and len(guards) == 1:
            post_guard = guards[0]
            tops = releases(post_guard.then)
        if nc[1] is not None:
            return "the consumer releases a stage after its step loop inside a persistent tile loop"
        if len(ring_ops) != 1 or len(tops) != 1:
            return (f"after its step loop the consumer may only release the last step's stage, once "
                    f"(one arrive on '{empty}', at the top level or in one `if` without else there, not "
                    f"in a loop)")
        lag, post_release = 1, tops[0]
    tile = None
    if np_[1] is not None and any(isinstance(s, MBAR_OPS) for nest in (np_, nc) for part in (nest[2], nest[4])
                                  for s in walk(part)):
        tile = tile_ring(prod, cons, np_, nc, (full, empty), barriers)
        if isinstance(tile, str):
            return tile
    for role, nest in ((prod, np_), (cons, nc)):
        # a one-shot barrier of the role's own (a TMA load of a tile it keeps, completed and waited for
        # before the steps) is simulated with the role's plain statements; the ring's are not touched
        parts = (nest[0], nest[5]) if tile is not None else (nest[0], nest[2], nest[4], nest[5])
        outside = [s for part in parts for s in walk(part) if isinstance(s, MBAR_OPS) and s is not post_release]
        if any(s.barrier.name in (full, empty) for s in outside) or (outside and nest[1] is not None):
            return f"the {role.kind} uses the ring's mbarriers outside its step loop"
        other = cons if role is prod else prod
        theirs = {s.barrier.name for s in walk(other.body) if isinstance(s, MBAR_OPS)}
        if any(s.barrier.name in theirs for s in outside):
            return f"the {role.kind} shares a one-shot mbarrier with the other role"
    S = barriers[full].n or 1
    if (barriers[empty].n or 1) != S:
        return f"'{full}' and '{empty}' have different numbers of stages"
    buffers = frozenset(c.dst.base for c in copies)
    for role, nest in ((prod, np_), (cons, nc)):
        # the consumer's code after the loop may read the last stage before it releases it
        post = nest[5] if post_release is None or role is prod else _after(nest[5], post_release, post_guard)
        for part in (nest[0], nest[2], nest[4], post):
            for x in walk(part):
                if isinstance(x, ir.Ref) and x.space == "shared" and x.base in buffers:
                    return f"the {role.kind} touches ring buffer '{x.base}' outside its step loop"
    for x in walk(pstep.body):
        if isinstance(x, ir.Ref) and x.space == "shared" and x.base in buffers and \
                not any(c.dst is x for c in copies):
            return f"the producer reads ring buffer '{x.base}'"
    cwaits = [s for s in walk(cstep.body) if isinstance(s, ir.WaitBarrier)]
    if len(cwaits) != 1 or cwaits[0].barrier.name != full:
        return f"the consumer's step does not wait exactly once, on '{full}'"
    if tile is not None and tile.buffers & buffers:
        return "a buffer is filled both per step and per tile"
    plan = RingPlan(prod, cons, full, empty, S, buffers, np_[1] is not None, lag=lag, post_release=post_release,
                    post_guard=post_guard, tile=tile)
    for role, step in ((prod, pstep), (cons, cstep)):
        for x in walk(step.body):
            if isinstance(x, (ir.Arrive, ir.ExpectTx, ir.WaitBarrier)) and x.barrier.name not in (full, empty):
                return f"the {role.kind} uses a third mbarrier '{x.barrier.name}' in its step"
    expects = [s for s in walk(pstep.body) if isinstance(s, ir.ExpectTx)]
    f_arrivals = len(expects) + sum(isinstance(s, ir.Arrive) and s.barrier.name == full for s in walk(pstep.body))
    e_arrivals = sum(isinstance(s, ir.Arrive) and s.barrier.name == empty for s in walk(cstep.body))
    if f_arrivals != barriers[full].count:
        plan.problems.append(("deadlock", barriers[full].span,
                              f"'{full}' completes after {barriers[full].count} arrival(s) but the producer arrives "
                              f"{f_arrivals} time(s) per step"))
    if e_arrivals != barriers[empty].count:
        plan.problems.append(("deadlock" if e_arrivals < barriers[empty].count else "async-overwrite",
                              barriers[empty].span, f"'{empty}' completes after {barriers[empty].count} "
                              f"arrival(s) but the consumer releases a stage {e_arrivals} time(s) per step"))
    return plan


def tile_ring(prod: ir.Role, cons: ir.Role, np_, nc, step_ring: tuple[str, str],
              barriers: dict[str, ir.AllocBarrier]) -> RingPlan | str:
    """The per-tile ring of a persistent nest, or the reason its mbarrier use outside the step loops is not
    one: before its steps the producer's tile issues bulk copies completing on `full` (announced with
    expect_tx) after waiting on `empty`; the consumer's tile waits on `full` and arrives on `empty`, at top
    level before or after its steps. Where the waits and releases sit is checked by the verifier (a read
    before the wait, a release before the last read); a misplaced producer wait, or none, is a static
    problem."""
    why = "the roles' mbarriers outside the step loops are not a per-tile ring (the producer fills a buffer " \
          "with expect_tx and bulk copies on one barrier before its steps, after waiting on another that the " \
          "consumer releases; the consumer waits on the first)"

    def ops(part) -> list | None:
        found = [s for s in walk(part) if isinstance(s, (*MBAR_OPS, ir.Copy))]
        top = [s for s in part if isinstance(s, (*MBAR_OPS, ir.Copy))]
        return found if len(found) == len(top) else None  # not under a branch or a loop

    pre_p, post_p, pre_c, post_c = ops(np_[2]), ops(np_[4]), ops(nc[2]), ops(nc[4])
    if any(x is None for x in (pre_p, post_p, pre_c, post_c)):
        return why + ": one of them sits under a branch or a loop"
    if any(isinstance(s, (*MBAR_OPS, ir.Copy)) for s in post_p):
        return why + ": the producer uses an mbarrier or copies after its steps"
    copies = [s for s in pre_p if isinstance(s, ir.Copy)]
    if not copies or any(c.mode != "bulk" or c.barrier is None for c in copies) or \
            len({c.barrier.name for c in copies}) != 1:
        return why + ": the producer's tile set-up issues no bulk copies on one mbarrier"
    full = copies[0].barrier.name
    cops = [s for s in pre_c + post_c if isinstance(s, MBAR_OPS)]
    releases = {s.barrier.name for s in cops if isinstance(s, ir.Arrive)}
    pwaits = [s for s in pre_p if isinstance(s, ir.WaitBarrier)]
    names = releases | {w.barrier.name for w in pwaits}
    if len(names) != 1:
        return why + ": the producer's wait and the consumer's release are not on one other mbarrier"
    empty = names.pop()
    if full == empty or {full, empty} & set(step_ring) or full not in barriers or empty not in barriers:
        return why + ": its barriers are the step ring's or the same one"
    if any(isinstance(s, ir.Copy) for s in pre_c + post_c) or \
            any(s.barrier.name not in (full, empty) for s in pre_p + cops if isinstance(s, MBAR_OPS)) or \
            any(isinstance(s, (ir.WaitBarrier, ir.ExpectTx)) and s.barrier.name != full for s in cops) or \
            any(isinstance(s, ir.Arrive) and s.barrier.name != full for s in pre_p) or \
            any(isinstance(s, ir.ExpectTx) and s.barrier.name != full for s in pre_p) or len(pwaits) > 1 or \
            sum(isinstance(s, ir.WaitBarrier) for s in cops) > 1:
        return why + ": another mbarrier, a second wait, or a copy by the consumer"
    buffers = frozenset(c.dst.base for c in copies)
    for role in (prod, cons):
        for x in walk(role.body):
            if isinstance(x, ir.Copy) and x.dst.base in buffers and not any(x is c for c in copies):
                return f"the {role.kind} writes the per-tile buffer '{x.dst.base}' outside the producer's tile set-up"
            if role is prod and isinstance(x, ir.Ref) and x.space == "shared" and x.base in buffers and \
                    not any(c.dst is x for c in copies):
                return f"the producer reads the per-tile buffer '{x.base}'"
    S = barriers[full].n or 1
    if (barriers[empty].n or 1) != S:
        return f"'{full}' and '{empty}' have different numbers of stages"
    plan = RingPlan(prod, cons, full, empty, S, buffers, True)
    if not pwaits or pre_p.index(pwaits[0]) > pre_p.index(copies[0]):
        plan.problems.append(("async-overwrite", copies[0].span, f"the producer refills '{copies[0].dst.base}' "
                              f"for its next tile without first waiting on '{empty}' for the consumer to release "
                              "it: the copy can overwrite data the consumer's previous tile still reads"))
    f_arrivals = sum(isinstance(s, (ir.ExpectTx, ir.Arrive)) for s in pre_p)
    if f_arrivals != barriers[full].count:
        plan.problems.append(("deadlock", barriers[full].span, f"'{full}' completes after {barriers[full].count} "
                              f"arrival(s) but the producer arrives {f_arrivals} time(s) per tile"))
    e_arrivals = sum(isinstance(s, ir.Arrive) for s in cops)
    if e_arrivals and e_arrivals != barriers[empty].count:
        plan.problems.append(("deadlock" if e_arrivals < barriers[empty].count else "async-overwrite",
                              barriers[empty].span, f"'{empty}' completes after {barriers[empty].count} arrival(s) "
                              f"but the consumer releases it {e_arrivals} time(s) per tile"))
    return plan


def _role_list(body: tuple[ir.Stmt, ...]) -> tuple[ir.Role, ...]:
    """The roles of the first statement list that holds any: the kernel body's, or a branch's around them
    (`if r0 < r_end:` before an MoE tile's roles)."""
    roles = tuple(s for s in body if isinstance(s, ir.Role))
    if roles:
        return roles
    for s in body:
        if isinstance(s, ir.If):  # a branch only: roles inside a loop would start a ring per trip
            for branch in (s.then, s.orelse):
                got = _role_list(branch)
                if got:
                    return got
    return ()


def kernel_ring_plan(kernel: ir.Kernel) -> RingPlan | None:
    """The ring of a kernel whose body (or a branch of it) holds exactly two roles, or None."""
    roles = _role_list(kernel.body)
    if len(roles) != 2:
        return None
    plan = ring_plan(roles, {s.name: s for s in walk(kernel.body) if isinstance(s, ir.AllocBarrier)})
    return None if isinstance(plan, str) else plan
