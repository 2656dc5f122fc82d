"""What the benchmark scripts share.

benchmarks/RESULTS.md holds one section per benchmark (GEMM, attention, MoE), each between markers
`<!-- section:NAME -->` and `<!-- /section:NAME -->`, so a benchmark rewrites its own section only
(`update_section`, `write_markdown`). `checked_variants` runs each variant's correctness check in a
child process, so a faulting or hanging kernel costs only that variant.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"

ORDER = ("gemm", "attention", "attention-decode", "moe", "ops", "tune")  # where a section that is not there yet goes


def update_section(path: Path, name: str, markdown: str) -> None:
    """Replace section `name` of `path` with `markdown` (or insert it in ORDER position)."""
    text = path.read_text() if path.exists() else ""
    start, end = f"<!-- section:{name} -->", f"<!-- /section:{name} -->"
    block = f"{start}\n{markdown.rstrip()}\n{end}\n"
    if start in text and end in text:
        a, b = text.index(start), text.index(end) + len(end)
        text = text[:a] + block.rstrip("\n") + text[b:]
    else:
        later = [n for n in ORDER[ORDER.index(name) + 1:] if f"<!-- section:{n} -->" in text] if name in ORDER else []
        if later:
            a = text.index(f"<!-- section:{later[0]} -->")
            text = text[:a] + block + "\n" + text[a:]
        else:
            text = (text.rstrip("\n") + "\n\n" if text.strip() else "") + block
    path.write_text(text)


def write_markdown(dest: str, name: str, markdown: str) -> None:
    """Print the section, and write it into RESULTS.md-like file `dest` ('-': stdout only)."""
    if dest != "-":
        update_section(Path(dest), name, markdown)
    print(markdown)


def checked_variants(script: str, variants: list, timeout: float) -> list:
    """The variants whose `script --child-check KEY` exits 0; all children run at once."""
    procs = {v.key: subprocess.Popen([sys.executable, script, "--child-check", v.key], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True) for v in variants}
    kept = []
    for v in variants:
        try:
            text, _ = procs[v.key].communicate(timeout=timeout)
            print(text[-3000:], end="", flush=True)
            ok = procs[v.key].returncode == 0
        except subprocess.TimeoutExpired:
            procs[v.key].kill()
            print(f"[{v.key}] check timed out", flush=True)
            ok = False
        if ok:
            kept.append(v)
        else:
            print(f"[{v.key}] excluded: it failed its correctness check", flush=True)
    return kept


def output_args(ap: argparse.ArgumentParser, name: str, iters: int, child_check: bool = True) -> None:
    """The options every benchmark takes: --iters, --md (its RESULTS.md section), --json, and the
    per-variant correctness check in a child process."""
    ap.add_argument("--iters", type=int, default=iters)
    ap.add_argument("--md", default=str(RESULTS), help="markdown output ('-': stdout)")
    ap.add_argument("--json", default=os.path.join(os.environ.get("OUT", "/tmp"), f"bench_{name}.json"))
    if child_check:
        ap.add_argument("--no-child-check", action="store_true")
        ap.add_argument("--child-check", help=argparse.SUPPRESS)


def pick_variant(variants: list, key: str):
    """A variant by key; `base[P=V;P=V]` (probes) is variant `base` with those params on top (ints, True /
    False, or strings as written)."""
    base, _, extra = key.partition("[")
    v = next(x for x in variants if x.key == base)
    if not extra:
        return v
    params = dict(v.params)
    for item in extra.rstrip("]").split(";"):
        name, _, value = item.partition("=")
        value = value.strip()
        params[name.strip()] = int(value) if value.lstrip("-").isdigit() else \
            {"True": True, "False": False}.get(value, value)
    return dataclasses.replace(v, key=key, title=f"{v.title} with {extra.rstrip(']').replace(';', ' ')}",
                               params=params)

