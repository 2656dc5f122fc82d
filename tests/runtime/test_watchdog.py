"""The mbarrier wait's watchdog: a kernel whose wait nothing completes stops with an error instead of hanging.

The check refuses such a kernel (deadlock); this builds it without the check, as a protocol bug the
verifier missed would reach the GPU. The trap leaves the CUDA context unusable, so the launch runs in a
child process.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.conftest import ROOT

# the producer never arrives on `ready`: the consumer's wait can only end through the watchdog
STUCK = """\
kernel stuck(X: bf16[R, C], Y: bf16[R, C]):
    launch grid=(1, 1), warpgroups=2
    z_s = shared(bf16[64, 64])
    ready = mbarrier(count=1)
    with role("producer", warpgroups=1):
        copy(z_s, X[0 : +64, 0 : +64])
    with role("consumer", warpgroups=1):
        wait(ready, 0)
        store(Y[0 : +64, 0 : +64], load(z_s))
reference:
    Y = X
"""

def test_the_deadlock_is_refused_by_check() -> None:
    from argus.analysis import VIOLATED, verify
    from argus.ir.build import build_source

    report = verify(build_source(STUCK), test=False)
    assert report.status == VIOLATED
    assert any(r.status == VIOLATED and r.check == "deadlock" for r in report.results), \
        [(r.check, r.status) for r in report.results]


@pytest.mark.gpu
def test_a_wait_nothing_completes_traps_instead_of_hanging() -> None:
    code = textwrap.dedent("""
        import sys
        import torch
        from argus.codegen.compile import build
        from argus.codegen.nvrtc import detect_arch
        from argus.ir.build import build_source
        from argus.runtime.launch import GpuKernel

        built = build(build_source(sys.stdin.read()), arch=detect_arch(),
                      options=("-DAG_WATCHDOG_SPINS=100000",))
        x = torch.randn(64, 64, device="cuda").to(torch.bfloat16)
        y = torch.empty_like(x)
        GpuKernel(built)(x, y)
        torch.cuda.synchronize()
        print("finished")
    """)
    r = subprocess.run([sys.executable, "-c", code], input=STUCK, capture_output=True, text=True, timeout=120,
                       cwd=ROOT)
    assert r.returncode != 0, r.stdout + r.stderr
    assert "finished" not in r.stdout
    assert "Traceback" in r.stderr  # the launch's error surfaced (illegal instruction / launch failure)
