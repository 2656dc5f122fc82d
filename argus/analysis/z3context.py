"""Z3's process-wide main context, started afresh for each verification.

Z3's heuristics depend on the terms a context already holds (their ids order E-matching and case splits): a
MoE bug's tag-assertion was violated in a fresh process and unknown after other kernels had been verified in
the same one (a test worker, 2026-12-06). Every verification therefore starts from an empty main context, so
`verify()` in a test, in `argus tune` or in a Python caller gives the verdict `argus check` gives. The caches
of per-node summaries are keyed by node ids, which a new context reuses: they are emptied with it.
"""

from __future__ import annotations

import z3

from argus.analysis import contract_inputs, solving, symbolic, terms


def fresh_main_context() -> None:
    """The next z3 call without an explicit context creates a new main context. Terms made before stay
    valid in their own (old) context; mixing them with new ones raises, never answers."""
    z3.z3._main_ctx = None
    symbolic._MAIN_TACTIC.clear()
    terms.NAMES.clear()
    solving.SCANNED.clear()
    solving._LINEAR.clear()
    contract_inputs._CONTRACTS.clear()
