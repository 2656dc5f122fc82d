"""The verifier's checks, one module each; `ALL` is the order `argus check` runs them in."""

from argus.analysis.checks import alignment, bounds, coverage, deadlock, mma_layout, obligations, races, swizzle

ALL = [obligations, races, bounds, coverage, mma_layout, swizzle, alignment, deadlock]
