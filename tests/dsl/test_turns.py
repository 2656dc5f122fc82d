"""`with turn():` (ping-pong consumers): accepted where the round robin cannot deadlock, refused at its line
elsewhere (argus/dsl/turns.py), lowered to Turn edges that the interpreter and verifier ignore and the code
generator turns into named barriers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from argus.codegen.emit import generate
from argus.dsl.diagnostics import ArgusError
from argus.interp.run import run_interp
from argus.ir import nodes as ir
from argus.ir.build import build_source
from argus.ir.printer import kernel as print_kernel

CORPUS = Path(__file__).resolve().parents[1] / "analysis" / "corpus" / "correct"
KERNEL = (CORPUS / "ring_pingpong_turns.arg").read_text()
TURN = """            with turn():
                wait(full[s], k // STAGES % 2)
                acc = mma(a_s[s], b_s[s], acc, instr="wgmma")
            arrive(empty[s])
"""
DIMS = {"M": 200, "N": 136, "K": 72}


def variant(turn: str, extra: str = "") -> str:
    assert TURN in KERNEL
    return KERNEL.replace(TURN, turn).replace("        acc = zeros(f32[BM, BN])\n",
                                               "        acc = zeros(f32[BM, BN])\n" + extra)


def refused(src: str, defines=None) -> ArgusError:
    with pytest.raises(ArgusError) as info:
        k = build_source(src, {**DIMS, **(defines or {})}, path="t.arg")
        generate(k)
    return info.value


def test_turn_lowers_to_edges_the_interpreter_runs_through():
    k = build_source(KERNEL, DIMS, path="t.arg")
    edges = [s.edge for s in _walk(k.body) if isinstance(s, ir.Turn)]
    assert edges == ["begin", "end"]
    assert "turn_begin()" in print_kernel(k) and "turn_end()" in print_kernel(k)
    res = run_interp(k, DIMS, seed=3)  # fresh random inputs, poisoned outputs, against float64 A @ B
    assert res.ok, res.checks
    assert np.isfinite(res.arrays["C"]).all()


def test_turn_builds_to_named_barriers_in_round_robin():
    src = generate(build_source(KERNEL, DIMS, path="t.arg")).source
    assert "if ((ag_rtid >> 7) == 1) ag_bar_arrive(8, 256);" in src   # the last warpgroup opens the first turn
    assert "ag_bar_sync(8 + (ag_rtid >> 7), 256);" in src
    assert "ag_bar_arrive(8 + ((ag_rtid >> 7) + 1) % 2, 256);" in src
    sync, wait = src.index("ag_bar_sync(8 +"), src.index("ag_mbar_wait", src.index("ag_bar_sync(8 +"))
    assert sync < wait < src.index("ag_bar_arrive(8 + (")


def test_turn_off_is_the_plain_body():
    src = KERNEL.replace("with turn():", "with turn(PP):").replace("    param STAGES = 3\n",
                                                                   "    param STAGES = 3\n    param PP = False\n")
    k = build_source(src, DIMS, path="t.arg")
    assert not any(isinstance(s, ir.Turn) for s in _walk(k.body))
    assert any(isinstance(s, ir.Turn) for s in _walk(build_source(src, {**DIMS, "PP": True}, path="t.arg").body))


def test_one_warpgroup_turn_emits_no_barrier():
    src = KERNEL.replace("param BM = 128", "param BM = 64").replace("warpgroups=3", "warpgroups=2") \
        .replace('role("consumer", warpgroups=2', 'role("consumer", warpgroups=1')
    assert "ag_bar_sync(8" not in generate(build_source(src, DIMS, path="t.arg")).source


@pytest.mark.parametrize("turn, extra, line_of, message", [
    # a wait after an arrive inside the turn: the next warpgroup arrives only in its own turn
    ("""            with turn():
                arrive(empty[s])
                wait(full[s], k // STAGES % 2)
                acc = mma(a_s[s], b_s[s], acc, instr="wgmma")
""", "", "wait(full[s]", "a wait after an arrive inside a turn"),
    # the same through a loop's second trip
    ("""            with turn():
                for r in range(2):
                    wait(full[s], k // STAGES % 2)
                    arrive(empty[s])
            acc = mma(a_s[s], b_s[s], acc, instr="wgmma")
""", "", "wait(full[s]", "a wait after an arrive inside a turn"),
    # a barrier of the whole role inside the turn
    ("""            with turn():
                wait(full[s], k // STAGES % 2)
                acc = mma(a_s[s], b_s[s], acc, instr="wgmma")
                barrier()
            arrive(empty[s])
""", "", "barrier()", "barrier(...) inside a turn"),
    # turns under a condition that differs between threads
    ("""            if wg == 0:
                with turn():
                    wait(full[s], k // STAGES % 2)
                    acc = mma(a_s[s], b_s[s], acc, instr="wgmma")
            arrive(empty[s])
""", "        wg = warpgroup_id() % 2\n", "wg == 0", "depends on the thread"),
    # nested turns
    ("""            with turn():
                with turn():
                    wait(full[s], k // STAGES % 2)
                acc = mma(a_s[s], b_s[s], acc, instr="wgmma")
            arrive(empty[s])
""", "", "turn():\n                    wait", "a turn holds no role or other turn"),
])
def test_turn_refused_at_its_line(turn, extra, line_of, message):
    src = variant(turn, extra)
    err = refused(src)
    d = err.diagnostics[0]
    assert d.code == "turn" and message in d.message
    assert d.span.line == src[:src.index(line_of)].count("\n") + 1


def test_turn_outside_a_role_and_with_arguments():
    head = '    with role("producer"'
    src = variant(TURN).replace(head, "    with turn():\n        pass\n" + head)
    assert "inside `with role" in refused(src).diagnostics[0].message
    err = refused(variant(TURN.replace("turn()", "turn(M > 3)")))
    assert err.diagnostics[0].code == "not-compile-time"


def test_a_sync_the_code_generator_needs_inside_a_turn_is_refused_at_its_line():
    """A column reduction over the accumulator crosses warpgroups through shared scratch: a barrier of the
    whole role, which the code generator refuses inside a turn (and so `check` does, at that line)."""
    src = variant("""            with turn():
                wait(full[s], k // STAGES % 2)
                acc = mma(a_s[s], b_s[s], acc, instr="wgmma")
                colsum = sum(acc, axis=0)
            arrive(empty[s])
""")
    err = refused(src)
    d = err.diagnostics[0]
    assert d.code == "turn" and "barrier of the whole role" in d.message
    assert d.span.line == src[:src.index("colsum =")].count("\n") + 1


def test_pingpong_attention_example_verifies():
    from argus.dsl.parser import parse_file
    from argus.verification import verify_kernel

    path = Path(__file__).resolve().parents[2] / "examples" / "flash_attention_ws.arg"
    node = parse_file(path).kernel("flash_attention_ws_fa3")
    v = verify_kernel(node, {"PINGPONG": True, "B": 1, "H": 2, "HKV": 2, "SQ": 200, "SKV": 333, "D": 128},
                      file=str(path), test=False)
    assert v.status == "verified", v.render()


def _walk(body):
    for s in body:
        yield s
        for f in ("body", "then", "orelse"):
            yield from _walk(getattr(s, f, ()) or ())
