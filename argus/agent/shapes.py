"""Problem shapes: the targets a run optimises for, the small ones the planner sees, and hidden ones.

The referee checks correctness at the planner-visible small shapes and at fresh irregular shapes it
draws itself for each evaluation (never shown to the planner), so a kernel cannot be tuned to pass
only the shapes it was shown. Every drawn shape is made valid by the starting kernel's own assumes
over its dims (argus.agent.problem.ShapeSpace): a head dim pinned to a param stays pinned, a
`H == HKV * GROUP` stays true, `K % 8 == 0` stays true; counting dims (batch, heads, experts) stay
small, tiled dims are drawn irregular.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from argus.interp.budget import MAX_DIM

if TYPE_CHECKING:
    from argus.agent.problem import Inputs, ShapeSpace

Shape = dict[str, int]

GEMM_TARGETS = ({"M": 4096, "N": 4096, "K": 4096}, {"M": 8192, "N": 8192, "K": 8192})


def parse_shapes(text: str, dims: tuple[str, ...]) -> list[Shape]:
    """'4096,4096,4096;8192,8192,8192' (in the kernel's dim order) or 'M=4096,N=4096,K=4096;...'."""
    out = []
    for part in (p.strip() for p in text.split(";")):
        if not part:
            continue
        items = [x.strip() for x in part.replace("x", ",").split(",") if x.strip()]
        if any(len(x) > 40 for x in items):
            raise ValueError(f"shape {part[:40]!r}...: a size has too many digits")
        if all("=" in x for x in items):
            shape = {k.strip(): int(v) for k, v in (x.split("=", 1) for x in items)}
        elif len(items) == len(dims):
            shape = dict(zip(dims, (int(x) for x in items)))
        else:
            raise ValueError(f"shape {part!r}: give {len(dims)} sizes ({', '.join(dims)}) or NAME=VALUE pairs")
        missing = [d for d in dims if d not in shape]
        extra = [d for d in shape if d not in dims]
        if missing or extra:
            raise ValueError(f"shape {part!r}: needs exactly the dims {', '.join(dims)}")
        if any(v < 1 or v > MAX_DIM for v in shape.values()):
            raise ValueError(f"shape {part!r}: sizes must be integers from 1 to {MAX_DIM}")
        out.append({d: shape[d] for d in dims})
    if not out:
        raise ValueError("no shapes given")
    return out


def default_targets(space: ShapeSpace, inputs: Inputs) -> list[Shape]:
    """GEMM: 4096^3 and 8192^3; a routed MoE kernel: a 2048-token routing (argus.agent.problem);
    otherwise the tiled dims at 4096 and the counting dims at 8, as the assumes allow."""
    from argus.agent.problem import RoutedInputs, moe_targets

    if isinstance(inputs, RoutedInputs):
        return moe_targets()
    if set(space.names) == {"M", "N", "K"}:
        return [{d: s[d] for d in space.names} for s in GEMM_TARGETS]
    return space.targets()


COUNTING_MAX = 4  # counting dims (batch, heads, experts) of drawn shapes


def _valid(space: ShapeSpace | None, prefs: Shape) -> Shape:
    if space is None:
        return prefs
    got = space.draw(prefs)
    return got if got is not None else prefs


def hidden_shapes(visible: list[Shape], rng: np.random.Generator, n: int = 2,
                  fixed: frozenset[str] = frozenset(), hi: int = 280,
                  space: ShapeSpace | None = None) -> list[Shape]:
    """Fresh irregular shapes: tiled sizes drawn in [1, hi], odd-biased so they are rarely tile
    multiples; counting sizes in [1, 4]; then the nearest sizes the assumes allow."""
    base = visible[0] if visible else {}
    tiled = space.tiled if space is not None else frozenset(base)
    out = []
    for _ in range(n):
        s = {}
        for d, v in base.items():
            if d in fixed:
                s[d] = v
            elif d not in tiled:
                s[d] = int(rng.integers(1, COUNTING_MAX + 1))
            else:
                x = int(rng.integers(1, hi + 1))
                s[d] = x | 1 if rng.random() < 0.7 else x
        out.append(_valid(space, s))
    return out


def _off_grid(x: int, rng: np.random.Generator) -> int:
    """x moved off the multiples of 8 (tile sizes), staying >= 1."""
    if x % 8 == 0:
        x += int(rng.choice([-1, 1, -3, 5]))
    return max(1, x)


def scale_shapes(visible: list[Shape], targets: list[Shape], rng: np.random.Generator, n: int,
                 fixed: frozenset[str] = frozenset(), small: int = 280,
                 max_elements: int = 1 << 25, space: ShapeSpace | None = None) -> list[Shape]:
    """Hidden shapes up to the targets' scale: one dim large in each (taking turns over the dims from a
    random first one; sometimes a second is large too) — the target size itself, just below it, or
    anything between the small range and it, moved off multiples of 8 — the others small or extreme
    (1). A kernel that skips work above some size is run where it does. Each shape stays within
    `max_elements` for any two of its dims, so the interpreter can run it whole."""
    base = visible[0] if visible else {}
    tiled = space.tiled if space is not None else frozenset(base)
    free = [d for d in base if d not in fixed]
    top = {d: max([int(t.get(d, 0)) for t in targets] + [base[d]]) for d in base}
    grow = [d for d in free if top[d] > small and d in tiled]
    if not grow:
        return []
    first = int(rng.integers(len(grow)))
    out: list[Shape] = []
    for i in range(n):
        big = {grow[(first + i) % len(grow)]}
        if len(grow) > 1 and len(free) > 2 and rng.random() < 0.3:
            big.add(grow[(first + i + 1) % len(grow)])
        s: Shape = {}
        for d, v in base.items():
            if d in fixed:
                s[d] = v
            elif d in big:
                kind = rng.random()
                if kind < 0.3:
                    s[d] = top[d]
                elif kind < 0.5:
                    s[d] = max(1, top[d] - int(rng.integers(1, 8)))
                else:
                    s[d] = _off_grid(int(rng.integers(small + 1, top[d] + 1)), rng)
            elif d not in tiled:
                s[d] = int(rng.integers(1, COUNTING_MAX + 1))
            else:
                s[d] = 1 if rng.random() < 0.15 else _off_grid(int(rng.integers(1, small + 1)), rng)
        for d in sorted(s, key=lambda d: -s[d]):  # bound any two dims' product by shrinking the small ones
            while d not in big and d not in fixed and s[d] > 1 and \
                    s[d] * max(s[x] for x in s if x != d) > max_elements:
                s[d] = max(1, s[d] // 2) | 1
        out.append(_valid(space, s))
    return out


def label(s: Shape) -> str:
    return ",".join(f"{k}={v}" for k, v in s.items())
