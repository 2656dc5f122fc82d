"""Statements of a kernel body as text: what the structural rewrites move, classify and re-indent.

A statement is its first code line, its continuation lines (open brackets) and, for a line ending in
`:`, the block below it; comment lines directly above it travel with it. Classification reads the
lowered IR where text cannot tell (whether `x = ...` binds a scalar or a tile).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from argus.agent.source import SourceError, split_top

DTYPE_BYTES = {"bf16": 2, "f16": 2, "f32": 4, "f64": 8, "i8": 1, "u8": 1, "i16": 2, "i32": 4, "i64": 8,
               "f8e4m3": 1, "f8e5m2": 1, "bool": 1}


def _indent(ln: str) -> str:
    return ln[: len(ln) - len(ln.lstrip())]


def code_of(ln: str) -> str:
    """The line without its comment (quotes respected)."""
    quote = None
    for i, ch in enumerate(ln):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch == "#":
            return ln[:i]
    return ln


def _depth(ln: str) -> int:
    c = code_of(ln)
    c = re.sub(r"\"[^\"]*\"|'[^']*'", "", c)
    return sum(c.count(x) for x in "([{") - sum(c.count(x) for x in ")]}")


@dataclass(frozen=True)
class Stmt:
    lo: int  # first line (leading comments included)
    head: int  # first code line
    hi: int  # one past the last line

    def lines(self, lines: list[str]) -> list[str]:
        return lines[self.lo: self.hi]

    def code(self, lines: list[str]) -> str:
        """The statement's code on one line (continuations joined, comments dropped, block excluded)."""
        out, depth, i = [], 0, self.head
        while True:
            out.append(code_of(lines[i]).strip())
            depth += _depth(lines[i])
            i += 1
            if depth <= 0 or i >= self.hi:
                break
        return " ".join(out)


def statements(lines: list[str], lo: int, hi: int, indent: str | None = None) -> list[Stmt]:
    """The statements of lines[lo:hi], all at one indentation (that of the first code line)."""
    out: list[Stmt] = []
    pending = None
    i = lo
    while i < hi:
        ln = lines[i]
        if not ln.strip() or ln.lstrip().startswith("#"):
            if pending is None:
                pending = i
            i += 1
            continue
        if indent is None:
            indent = _indent(ln)
        if _indent(ln) != indent:
            raise SourceError(f"line {i + 1}: unexpected indentation")
        start = i if pending is None else pending
        pending = None
        depth, j = _depth(ln), i + 1
        while depth > 0 and j < hi:
            depth += _depth(lines[j])
            j += 1
        if code_of(lines[j - 1]).rstrip().endswith(":"):
            while j < hi and (not lines[j].strip() or len(_indent(lines[j])) > len(indent)):
                j += 1
            while j > i + 1 and not lines[j - 1].strip():
                j -= 1
        out.append(Stmt(start, i, j))
        i = j
    return out


def reindent(block: list[str], old: str, new: str) -> list[str]:
    out = []
    for ln in block:
        if not ln.strip():
            out.append("")
        elif ln.startswith(old):
            out.append(new + ln[len(old):])
        else:
            out.append(new + ln.lstrip())
    return out


def call_args(code: str, name: str) -> tuple[list[str], dict[str, str]] | None:
    """`name(a, b, k=v)` -> (["a", "b"], {"k": "v"}); None when the code is not that call."""
    m = re.match(rf"^{name}\s*\((.*)\)\s*$", code)
    if not m:
        return None
    args, kws = [], {}
    for part in split_top(m.group(1)):
        if not part:
            continue
        kw = re.match(r"^([A-Za-z_]\w*)\s*=(?!=)\s*(.*)$", part)
        if kw:
            kws[kw.group(1)] = kw.group(2)
        else:
            args.append(part)
    return args, kws


def assigned(code: str) -> str | None:
    """The name a simple assignment `x = ...` binds."""
    m = re.match(r"^([A-Za-z_]\w*)\s*=(?!=)", code)
    return m.group(1) if m else None


def shared_decl(code: str) -> tuple[str, str, list[str]] | None:
    """`x = shared(bf16[S, M, K], ...)` -> ("x", "bf16", ["S", "M", "K"])."""
    m = re.match(r"^([A-Za-z_]\w*)\s*=\s*shared\s*\(\s*(\w+)\s*\[(.*?)\]", code)
    if not m:
        return None
    return m.group(1), m.group(2), split_top(m.group(3))


def indexed(ref: str) -> tuple[str, str | None]:
    """`a_s[s]` -> ("a_s", "s"); `q_s` -> ("q_s", None)."""
    m = re.match(r"^([A-Za-z_]\w*)\s*(?:\[(.*)\])?$", ref.strip())
    if not m:
        raise SourceError(f"cannot read the buffer {ref!r}")
    return m.group(1), m.group(2)
