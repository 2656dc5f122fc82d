"""The consumer's deferred stage release (argus/codegen/release_lag.py): where it applies, the order of
the generated wait / release / next-step operations, and where it must not apply."""

from __future__ import annotations

import re

import pytest

from argus.codegen.emit import generate
from argus.codegen.release_lag import lagged_steps
from argus.dsl.diagnostics import ArgusError
from argus.ir.build import build_file, build_source
from tests.conftest import EXAMPLES


def _consumer(src: str) -> str:
    return src[src.index("role 'consumer'"):]


def _step_loop(src: str) -> str:
    body = _consumer(src)
    start = body.index("for (int k = 0;")
    return body[start:]


@pytest.mark.parametrize(("file", "kernel", "groups"), [("gemm_ws.arg", None, 1), ("gemm_ws.arg", "linear", 1),
                                                        ("moe.arg", "moe_up", 2), ("moe.arg", "moe_down", 1)])
def test_the_previous_stage_is_released_after_the_next_steps_wgmmas(file, kernel, groups) -> None:
    k = build_file(EXAMPLES / file, kernel=kernel)
    assert len(lagged_steps(k)) == 1
    src = generate(k).source
    loop = _step_loop(src)
    commit = loop.index("ag_wgmma_commit();")
    wait = loop.index(f"ag_wgmma_wait<{groups}>();")
    release = loop.index("ag_mbar_arrive(ag_rel")
    record = loop.index("_on = true;")
    # in the step: this step's wgmmas are committed, the previous step's are waited for and its stage
    # released, then this step's stage is recorded (no wait for its own wgmmas inside the loop)
    assert commit < wait < release < record
    step = loop[:loop.index("_on = true;")]
    assert "ag_wgmma_wait<0>();" not in step
    # after the loop: everything waited for, then the last step's stage released
    after = loop[record:]
    assert after.index("ag_wgmma_wait<0>();") < after.index("ag_mbar_arrive(ag_rel")
    assert len(re.findall(r"ag_mbar_arrive\(", _consumer(src))) == 2


def test_release_immediate_and_the_switch_keep_the_literal_release() -> None:
    k = build_file(EXAMPLES / "gemm_ws.arg", {"RELEASE": "immediate"})
    assert lagged_steps(k) == {}
    assert "ag_rel" not in generate(k).source
    k = build_file(EXAMPLES / "gemm_ws.arg")
    assert "ag_rel" not in generate(k, release_lag=False).source
    assert "ag_rel" not in generate(k, defer_wgmma=False).source


def test_one_stage_is_never_lagged() -> None:
    """With one stage the producer's next step waits for the release of this very step: deferring it past
    the consumer's next wait would deadlock."""
    k = build_file(EXAMPLES / "gemm_ws.arg", {"STAGES": 1})
    assert lagged_steps(k) == {}


def test_a_step_with_other_work_is_not_lagged() -> None:
    """FlashAttention's consumer step computes a softmax between its wgmmas (a register-A mma among them):
    not the shape the argument covers."""
    assert lagged_steps(build_file(EXAMPLES / "flash_attention_ws.arg")) == {}
    # a tile computation between the mma and the release
    src = (EXAMPLES / "gemm_ws.arg").read_text().replace(
        '                arrive(empty[s])\n', '                acc = acc * 1.0\n                arrive(empty[s])\n')
    assert "acc * 1.0" in src
    assert lagged_steps(build_source(src, path="scaled.arg")) == {}


def test_release_option_is_checked_at_its_line() -> None:
    src = (EXAMPLES / "gemm_ws.arg").read_text().replace('release=RELEASE', 'release="later"')
    with pytest.raises(ArgusError) as e:
        build_source(src, path="bad.arg")
    msg = str(e.value)
    assert "release=" in msg and "deferred" in msg and "immediate" in msg and "bad.arg:" in msg


def test_release_on_a_producer_is_refused() -> None:
    old = 'role("producer", warpgroups=1, registers=40)'
    src = (EXAMPLES / "gemm_ws.arg").read_text().replace(old, old[:-1] + ", release=RELEASE)")
    with pytest.raises(ArgusError, match="belongs to a consumer role"):
        build_source(src, path="bad.arg")
