"""Two alternating scratch regions per scope (argus/codegen/emit.py Emitter.scratch): a reduction or
layout conversion writes a region no thread still reads, so it needs a barrier before its write only when
both regions may be read. The CPU runs of these kernels (test_cpusim_examples.py) check the results."""

from __future__ import annotations

import re

from argus.codegen.emit import generate
from argus.ir.build import build_file
from tests.conftest import EXAMPLES


def _body(src: str) -> str:
    return src[src.index('extern "C"'):]


def test_straight_line_reductions_alternate_regions_and_skip_the_leading_barrier() -> None:
    """LayerNorm: two block-wide sums, each written, barrier, read: 2 barriers instead of 4."""
    src = _body(generate(build_file(EXAMPLES / "layernorm.arg", {"BN": 8192, "THREADS": 512})).source)
    assert src.count("__syncthreads();") == 2
    first, second = src.index("ag_scratch0)["), src.index("ag_scratch0_1)[")
    assert first < src.index("__syncthreads();") < second  # the second sum writes the other region
    # each region is written before its barrier and read after it
    for region in ("ag_scratch0)[", "ag_scratch0_1)["):
        w = src.index(region)
        assert "=" in src[w:src.index("\n", w)].split("]", 1)[1]  # the first mention is a write
        assert src.index("__syncthreads();", w) < src.index(region, src.index("__syncthreads();", w))


def test_a_reduction_in_a_loop_waits_before_its_write() -> None:
    """softmax_stats: two reductions per step; the loop's entry does not know who reads what, so the
    step's first write waits for a barrier; the second uses the other region."""
    src = _body(generate(build_file(EXAMPLES / "softmax.arg", kernel="softmax_stats")).source)
    loop = src[src.index("for (int j = 0;"):]
    writes = [m.start() for m in re.finditer(r"ag_scratch0(_1)?\)\[[^\]]*\] = ", loop)]
    assert len(writes) == 2
    assert "__syncthreads();" in loop[:writes[0]]
    between = loop[writes[0]:writes[1]]
    assert between.count("__syncthreads();") == 1  # only the first reduction's own barrier
