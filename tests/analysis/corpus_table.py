"""The corpus README table: for every file, its class, the check expected to flag it, what the interpreter
oracle shows, and today's `argus check` verdict.

    python -m tests.analysis.corpus_table [--verdicts DIR] [--timeout S] > tests/analysis/corpus/TABLE.md

Verdicts come from `argus check FILE --format json` at its defaults (replay and numeric tier on), run here
one file at a time under a timeout; with --verdicts DIR the JSON of an earlier run is read from
DIR/<correct|broken>__<stem>.json and only missing files are run and stored there.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

from argus.analysis.findings import CHECKS
from tests.analysis.corpus_oracle import CORPUS, corpus_files, judge, parse_header

ROOT_DIR = CORPUS.parent.parent.parent


def verdict_json(path: Path, cache: Path | None, timeout: int) -> dict:
    out = cache / f"{path.parent.name}__{path.stem}.json" if cache else None
    if out is not None and out.exists() and out.stat().st_size:
        return json.loads(out.read_text())
    t0 = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, "-m", "argus.cli", "check", str(path), "--format", "json"],
                           capture_output=True, text=True, timeout=timeout, cwd=ROOT_DIR)
        j = json.loads(p.stdout)
    except subprocess.TimeoutExpired:
        j = {"status": "timeout", "notes": [f"argus check ran over {timeout} s"]}
    except json.JSONDecodeError:
        j = {"status": "error", "notes": [(p.stderr or p.stdout).strip().splitlines()[-1:]]}
    j["seconds_wall"] = round(time.perf_counter() - t0, 2)
    if out is not None:
        out.write_text(json.dumps(j))
    return j


def summarise(j: dict) -> tuple[str, set[str]]:
    """(short text, violated check codes) of one file's verdict."""
    if j.get("status") == "error" and any(d.get("code") == "codegen" for d in j.get("diagnostics", [])):
        d = next(d for d in j["diagnostics"] if d.get("code") == "codegen")
        return f"refused (does not build): {d['message']}", {"refused"}
    if j.get("status") in ("timeout", "error"):
        return f"{j['status']}: {'; '.join(map(str, j.get('notes', [])))}", set()
    parts, violated = [], set()
    ks = [k for k in j.get("kernels", [j]) if "layer" not in k]
    for k in ks:
        st = k.get("status")
        bad = [c["check"] for c in k.get("checks", []) if c["status"] == "violated"]
        violated |= set(bad)
        tested = k.get("tested") or {}
        failed = bool(tested.get("shapes")) and not tested.get("ok", True)
        if failed:
            violated.add("tested")
        if st == "verified":
            text = "verified"
        elif st == "violated" and not bad and failed:
            text = "FAILED its numeric test"
        elif st == "violated":
            text = "violated " + ", ".join(dict.fromkeys(bad)) + (" (numeric test failed too)" if failed else "")
            unk = [c["check"] for c in k.get("checks", []) if c["status"] == "unknown"]
            if unk:
                text += f" (+{len(unk)} unknown)"
        else:
            unk = [c["check"] for c in k.get("checks", []) if c["status"] == "unknown"]
            msgs = list(dict.fromkeys(f["message"].removeprefix("not checked: ").removeprefix("unsupported construct: ")
                                      for f in k.get("findings", []) if f["status"] == "unknown"))
            notes = [n for n in k.get("notes", []) if "path(s) explored" not in n and "symbolic execution:" not in n]
            why = "; ".join((msgs or [re.sub(r"^\S+\.arg:\d+: ", "", n) for n in notes])[:1]) or "no reason given"
            which = "all checks" if len(unk) == len(CHECKS) else ", ".join(unk)
            text = f"unknown ({which}): {why}"
        parts.append(f"{k.get('kernel')}: {text}" if len(ks) > 1 else text)
    return "; ".join(parts), violated


def oracle_text(path: Path) -> str:
    h = parse_header(path)
    v = judge(path)
    if not h.observable:
        return "not observable today (see # oracle:)"
    if not v.wrong:
        return f"correct at {len(h.dims)} shapes"
    dims = " ".join(f"{d}={n}" for d, n in v.dims.items())
    r = v.reason
    m = re.match(r"wrong output: \w+: .*?(\d+) wrong elements?, first (\w+\[[^\]]*\]) = (\S+) vs reference (\S+)", r)
    if m:
        out = f"wrong {m.group(2)} = {m.group(3)} vs {m.group(4)} ({m.group(1)} wrong)"
    elif r.startswith("wrong output"):
        out = r.removeprefix("wrong output: ")
    elif r.startswith("interpreter fault"):
        m = re.match(r"interpreter fault \[([\w-]+)\]: (.*?)( \(block.*)?$", r)
        out = f"fault [{m.group(1)}]: {m.group(2)}" if m else r
    elif r.startswith("observed hazard"):
        out = re.sub(r" \(block \(.*\)\)$", "", r.removeprefix("observed "))
    else:
        out = r
    return f"{out} — {v.kernel} at {dims}".replace("|", "\\|")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--verdicts", type=Path, default=None)
    ap.add_argument("--timeout", type=int, default=240)
    args = ap.parse_args(argv)
    if args.verdicts:
        args.verdicts.mkdir(parents=True, exist_ok=True)
    rows, tally, seconds = [], {}, []
    for kind in ("correct", "broken"):
        for f in corpus_files(kind):
            h = parse_header(f)
            j = verdict_json(f, args.verdicts, args.timeout)
            text, violated = summarise(j)
            seconds.append(float(j.get("seconds_wall", 0.0)))
            if kind == "correct":
                key = "flagged" if violated else "verified" if text == "verified" or all(
                    p.split(": ", 1)[-1] == "verified" for p in text.split("; ")) else "unknown"
            elif h.expects & violated:
                key = "flagged by an expected check" if h.expects - {"tested"} & violated or \
                    h.expects == {"tested"} else "flagged by its numeric test"
            elif violated & {"tested", "refused"} and not violated - {"tested", "refused"}:
                key = "flagged by its numeric test" if "tested" in violated else "refused by check (does not build)"
            elif violated:
                key = "flagged by another check"
            elif "unknown" in text or "timeout" in text:
                key = "unknown"
            else:
                key = "verified (missed)"
            tally[(kind, key)] = tally.get((kind, key), 0) + 1
            rows.append((f"{kind}/{f.name}", h.klass, (h.expect or "—").replace("|", "\\|"), oracle_text(f),
                         text.replace("|", "\\|"), f"{seconds[-1]:.1f}"))
    print("| file | class | expected check | what the oracle shows | today's verdict | s |")
    print("| --- | --- | --- | --- | --- | ---: |")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    print()
    for (kind, key), n in sorted(tally.items()):
        print(f"- {kind}: {key}: {n}")
    if seconds:
        ordered = sorted(seconds)
        print(f"- `argus check` wall time per file (a process each, import included): median "
              f"{ordered[len(ordered) // 2]:.1f} s, max {ordered[-1]:.1f} s over {len(ordered)} files")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
