"""Trip counts a loop needs explored (argus/analysis/periodicity.py): a mask against a constant."""

from __future__ import annotations

from pathlib import Path

import argus
from argus.analysis.periodicity import MASK_CAP_LIMIT, loop_shapes

WINDOW = Path(__file__).parent / "corpus" / "correct" / "fa_sliding_window.arg"


def _shape(**params):
    (sh,) = loop_shapes(argus.load(WINDOW, **params)._lowered()).values()
    return sh


def test_a_window_mask_raises_the_explored_trip_counts_past_its_edge() -> None:
    # the window's edge is WINDOW keys back: (40 + BQ + BKV) // BKV + period + 2 steps, not the usual 4
    sh = _shape(WINDOW=40)
    assert sh.ok and sh.data_ok and sh.cap == (40 + 64 + 32) // 32 + 3
    assert _shape(WINDOW=256).cap == (256 + 96) // 32 + 3 <= MASK_CAP_LIMIT


def test_a_window_too_far_to_explore_leaves_only_the_data_checks_uncertified() -> None:
    sh = _shape(WINDOW=4096)
    assert sh.ok and not sh.data_ok and "4096" in sh.data_why
    assert sh.cap == 4


def test_a_constant_below_one_step_still_counts_the_mask_extent() -> None:
    # a row 63 queries into the block sees a window of 8 only past the block's first kv step: the mask's
    # extent (BQ + BKV) counts as well as the constant
    assert _shape(WINDOW=8).cap == (8 + 96) // 32 + 3
