#!/usr/bin/env python3
"""Probe: is ping-pong scheduling of the two consumer warpgroups worth building into the language?

FlashAttention-3 takes turns between its consumer warpgroups with two named barriers: a warpgroup waits for
its turn (bar.sync), issues its step's GEMMs, and hands the turn to the other (bar.arrive), so one
warpgroup's softmax runs while the other's GEMMs keep the tensor cores busy. Argus has no such construct
yet; this probe adds the turn-taking to the generated CUDA of the warp-specialised attention kernels
(text edits on the code generator's output, made only here) and times the result against the unedited
kernels and cuDNN with bench_attention.run (same checks against float64, same timing).

    python3 benchmarks/probes/attention_pingpong.py --configs 4096x128,16384x128c --md -
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_attention as ba  # noqa: E402
from benchlib import write_markdown  # noqa: E402

PINGPONG = "-DAG_PROBE_PINGPONG=1"  # marks the builds to edit (a define the source never reads)
TURN0 = 8  # named barrier ids of the two warpgroups' turns (the code generator uses 0-2)


def _step_bodies(src: str, start: int) -> list[int]:
    """Where the consumer's kv steps begin: its step loops and a peeled first step."""
    out = []
    for marker in ("for (int j = ", "const int j = 0;"):
        i = src.find(marker, start)
        while i >= 0:
            out.append(i)
            i = src.find(marker, i + 1)
    return sorted(out)


def add_pingpong(src: str) -> str:
    """Each consumer warpgroup waits for its turn before its first wgmma of a kv step and hands the turn
    over after the last wgmma it issues before waiting on one."""
    role = src.index("// role 'consumer'")
    init = src.index("ag_bar_sync(2, 256);", role) + len("ag_bar_sync(2, 256);")
    edits = [(init, f"\n      const int ag_pp = ag_rtid >> 7;  // probe: this warpgroup's turn barrier is {TURN0} + ag_pp\n"
                    f"      if (ag_pp == 1) asm volatile(\"bar.arrive {TURN0}, 256;\" ::: \"memory\");\n")]
    for body in _step_bodies(src, init):
        wait = src.find("ag_wgmma_wait<", body)
        fence = src.find("ag_wgmma_fence();", body, wait)
        commit = src.rfind("ag_wgmma_commit();", body, wait)
        if wait < 0 or fence < 0 or commit < 0:
            continue
        edits.append((fence, f"asm volatile(\"bar.sync %0, 256;\" :: \"r\"({TURN0} + ag_pp) : \"memory\");\n          "))
        edits.append((commit + len("ag_wgmma_commit();"),
                      f"\n          asm volatile(\"bar.arrive %0, 256;\" :: \"r\"({TURN0 + 1} - ag_pp) : \"memory\");"))
    for at, text in sorted(edits, reverse=True):
        src = src[:at] + text + src[at:]
    return src


def _patch() -> None:
    from argus.codegen import compile as cc

    real = cc.compile_cached

    def compile_cached(source: str, *, options: tuple[str, ...] = (), **kw):
        if PINGPONG in options:
            source = add_pingpong(source)
        return real(source, options=options, **kw)

    cc.compile_cached = compile_cached


PP = {"codegen": {"options": (PINGPONG,)}}
VARIANTS = [
    ba.Variant("ws", "flash_attention_ws.arg", file="examples/flash_attention_ws.arg"),
    ba.Variant("ws-pp", "flash_attention_ws.arg with the consumers taking turns at their QK wgmmas",
               file="examples/flash_attention_ws.arg", **PP),
    ba.Variant("fa3-bf16-pp", "FA3 order (fa_ws_pipelined_pv_bf16) taking turns at QK j + P·V j-1",
               file="tests/analysis/corpus/correct/fa_ws_pipelined_pv_bf16.arg", **PP),
    ba.Variant("fa3-bf16", "FA3 order (fa_ws_pipelined_pv_bf16)",
               file="tests/analysis/corpus/correct/fa_ws_pipelined_pv_bf16.arg"),
    ba.Variant("ws-r240-pp", "ws-pp with producer 24 / consumers 240 registers", ba.R240,
               file="examples/flash_attention_ws.arg", **PP),
    ba.Variant("fa3-r240-pp", "FA3 order (fa_ws_pipelined_pv), producer 24 / consumers 240, taking turns", ba.R240,
               file="tests/analysis/corpus/correct/fa_ws_pipelined_pv.arg", **PP),
    ba.Variant("fa3-r240-s3-pp", "fa3-r240-pp with 3 stages", {**ba.R240, "STAGES": 3},
               file="tests/analysis/corpus/correct/fa_ws_pipelined_pv.arg", **PP),
    ba.Variant("fa3-bf16-r240-pp", "fa3-bf16-pp with producer 24 / consumers 240 registers", ba.R240,
               file="tests/analysis/corpus/correct/fa_ws_pipelined_pv_bf16.arg", **PP),
    ba.Variant("split-fa3-pp", "FA3 order, separate K and V rings, taking turns",
               file="benchmarks/probes/attention/fa_split_ring.arg", **PP),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variants", default=",".join(v.key for v in VARIANTS))
    ap.add_argument("--configs", default="4096x128,16384x128,4096x128c,16384x128c,4096x256,4096x64")
    ap.add_argument("--iters", type=int, default=15)
    ap.add_argument("--json", default="-")
    ap.add_argument("--md", default="-")
    ap.add_argument("--show", help="print the edited CUDA of this file (D=128) and exit")
    args = ap.parse_args()
    _patch()
    if args.show:
        import argus
        from argus.codegen.emit import generate

        print(add_pingpong(generate(argus.load(ROOT / args.show, HD=128).lower(), None).source))
        return 0
    keys = [k for k in args.variants.split(",") if k]
    variants = [v for v in VARIANTS if v.key in keys]
    res = ba.run(variants, [ba.parse_config(c) for c in args.configs.split(",") if c], args.iters)
    if args.json != "-":
        Path(args.json).write_text(json.dumps(res, indent=1))
    write_markdown(args.md, "attention", ba.markdown(res, args.iters))
    return 0 if all(r["ok"] for r in res["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
