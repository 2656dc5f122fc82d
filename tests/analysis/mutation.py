"""Mechanical mutants of the GEMM kernels, and the oracle that judges them.

Operators (applied one at a time to the kernel body): index +-1 on every tile offset, loop bound +-1
and swapped dims, dropped wait / barrier / commit / arrive / expect_tx / mbarrier wait lines, a flipped
mbarrier parity, stage index changed, mma operands swapped, tile offsets moved to the other block id.
A mutant is *wrong* when the interpreter, at one of a few small shapes, gives a wrong output, stops
with an error, or observes a race / async hazard / double write. The verifier must not say "verified"
for any wrong mutant.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from argus.dsl.diagnostics import ArgusError
from argus.interp.machine import execute
from argus.interp.run import compare, make_arrays
from argus.ir.build import build_source

SHAPES = [(64, 64, 32), (100, 72, 96), (130, 130, 200)]


@dataclass
class Mutant:
    name: str
    text: str


def _body_lines(text: str) -> list[int]:
    lines = text.splitlines()
    out = []
    for i, ln in enumerate(lines):
        s = ln.strip()
        if s.startswith(("#", "param", "reference", "kernel", "launch")) or not s or not ln.startswith("    "):
            continue
        if i > 0 and lines[i - 1].strip() == "reference:":
            continue
        out.append(i)
    return [i for i in out if "reference" not in lines[i]]


def mutants(text: str) -> list[Mutant]:
    lines = text.splitlines()
    ref = next(i for i, ln in enumerate(lines) if ln.startswith("reference:"))
    body = [i for i in _body_lines(text) if i < ref]
    out: list[Mutant] = []

    def emit(name, i, new):
        ls = list(lines)
        ls[i] = new
        out.append(Mutant(f"{name}@{i + 1}", "\n".join(ls) + "\n"))

    def drop(name, i):
        ls = list(lines)
        del ls[i]
        out.append(Mutant(f"{name}@{i + 1}", "\n".join(ls) + "\n"))

    for i in body:
        ln = lines[i]
        code = ln.split("#")[0]
        # index +-1 on tile offsets: every "X : +" start expression
        for m in re.finditer(r"\[([^\[\]:]+) :", code):
            for d in (" + 1", " - 1"):
                emit(f"offset{d.strip()[0]}1", i, code[: m.end(1)] + d + code[m.end(1):])
        # moved tile offsets: bm <-> bn
        if "bm" in code and "bn" in code:
            emit("swap-block-ids", i, code.replace("bm", "\0").replace("bn", "bm").replace("\0", "bn"))
        # loop bounds
        m = re.search(r"(pipeline|range)\((cdiv\([^()]*\))", code)
        if m:
            for d in (" + 1", " - 1"):
                emit(f"bound{d.strip()[0]}1", i, code[: m.end(2)] + d + code[m.end(2):])
            emit("bound-other-dim", i, code.replace("cdiv(K,", "cdiv(M,"))
        # dropped synchronisation
        if re.match(r"\s*(wait_async|barrier|commit|arrive|expect_tx|wait)\(", code):
            drop("drop-" + code.strip().split("(")[0], i)
        # mbarrier parity flipped
        m = re.match(r"^(\s*wait\([^,]+, )(.*)\)\s*$", code)
        if m:
            emit("parity+1", i, f"{m.group(1)}({m.group(2)} + 1) % 2)")
        # stage index
        for m in re.finditer(r"_s\[(s|k % 2|\(k \+ 1\) % 2)\]", code):
            emit("stage+1", i, code[: m.start(1)] + f"({m.group(1)} + 1) % STAGES" + code[m.end(1):])
        # swapped mma operands
        m = re.search(r"mma\(([^,]+), ([^,]+), ", code)
        if m:
            emit("swap-operands", i, code[: m.start(1)] + m.group(2) + ", " + m.group(1) + code[m.end(2):])
    return out


def interpreter_says_wrong(text: str, defines: dict) -> str | None:
    """A reason the mutant is wrong at some small shape (its own reference block, evaluated in float64;
    the mutants never touch it), or None. Blocks run in launch order and in reverse."""
    from argus.dsl.reference import evaluate_reference
    from argus.interp.run import reference_env

    try:
        kernel = build_source(text, defines, path="mutant.arg")
    except ArgusError:
        return None
    for M, N, K in SHAPES:
        dims = {"M": M, "N": N, "K": K}
        for reverse in (False, True):
            arrays = make_arrays(kernel, dims, np.random.default_rng(M))
            inputs = {n: a.copy() for n, a in arrays.items()}
            blocks = None
            if reverse:
                from itertools import product

                from argus.interp.machine import grid_size
                try:
                    blocks = list(product(*(range(n) for n in grid_size(kernel, dims, {}))))[::-1]
                except ArgusError as exc:
                    return f"interpreter error: {exc.diagnostics[0].message}"
            try:
                hazards = execute(kernel, arrays, dims, blocks=blocks, observe_hazards=True)
            except ArgusError as exc:
                return f"interpreter error: {exc.diagnostics[0].message}"
            if hazards:
                return f"hazard: {hazards[0].describe()}"
            ref = evaluate_reference(kernel.reference, reference_env(kernel, inputs, dims, {}))
            for o in kernel.outputs:
                c = compare(o, arrays[o], ref[o], kernel.tensor(o).dtype)
                if not c.ok:
                    return f"wrong output at {dims}: {c.describe()}"
    return None
