"""The soundness rule, as a meta-test: a construct the verifier does not model never yields "verified".

Each case injects one unmodelled construct into a kernel that verifies without it. Every check that reads
the explored paths must answer unknown and say why; only the kernel-only checks (TRACE_FREE) may still
answer, because they never look at the paths.
"""

from __future__ import annotations

import pytest

from argus.analysis import UNKNOWN, VERIFIED, verify
from argus.analysis.verify import TRACE_FREE
from argus.ir.build import build_source
from tests.interp.test_gemm import manual

BASE = manual("wait_async(a_s, b_s)")

# (what is injected, text replaced, replacement)
CONSTRUCTS = {
    "thread id in an index": ("    bm = block_id(0)", "    bm = block_id(0) + thread_id() * 0"),
    "lane id in a loop bound": ("for k in range(cdiv(K, BK)):", "for k in range(cdiv(K, BK) + lane_id() * 0):"),
    "warp id in a store row": ("store(C[bm * BM", "store(C[bm * BM + warp_id() * 0"),
    "loop start with unbounded values": ("for k in range(cdiv(K, BK)):", "for k in range(cdiv(K, BK) - 1, -1, -1):"),
}


def test_the_base_kernel_verifies():
    assert verify(build_source(BASE), do_replay=False).status == VERIFIED


@pytest.mark.parametrize("name", list(CONSTRUCTS))
def test_unmodelled_construct_is_never_verified(name):
    old, new = CONSTRUCTS[name]
    src = BASE.replace(old, new)
    assert src != BASE
    r = verify(build_source(src), do_replay=False)
    assert r.status != VERIFIED
    for c in r.results:
        if c.check in TRACE_FREE:
            continue
        assert c.status == UNKNOWN, (name, c.check, c.status)
        assert c.findings and all(f.message for f in c.findings), (name, c.check)  # the reason is given
