"""Line-level helpers over Argus source text, used by edits and structural rewrites.

Rewrites work on text (not on the AST) so that a candidate stays a readable program that the user can
diff, keep and hand-edit; every result is re-parsed and verified like any other candidate.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_PARAM = re.compile(r"^(?P<indent>[ \t]*)param[ \t]+(?P<name>[A-Za-z_]\w*)[ \t]*(?::[ \t]*\w+[ \t]*)?=[ \t]*"
                    r"(?P<value>\"[^\"\n]*\"|'[^'\n]*'|[^#\n]*?)(?P<tail>[ \t]*(?:#.*)?)$", re.M)
_PY_PARAM = re.compile(r"^(?P<indent>[ \t]*)(?P<name>[A-Za-z_]\w*)[ \t]*=[ \t]*param\((?P<value>[^()\n]*)\)"
                       r"(?P<tail>[ \t]*(?:#.*)?)$", re.M)


class SourceError(ValueError):
    """The text does not have the shape a rewrite needs (the rewrite is not applicable)."""


def literal(text: str) -> object:
    t = text.strip()
    if len(t) >= 2 and t[0] == t[-1] and t[0] in "\"'":
        return t[1:-1]
    if t in ("True", "False"):
        return t == "True"
    try:
        return int(t, 0)
    except ValueError:
        pass
    try:
        return float(t)
    except ValueError:
        return t  # an expression over earlier params: kept as text


def format_value(v: object) -> str:
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, str):
        return f'"{v}"'
    return repr(v)


def declared_params(text: str) -> dict[str, object]:
    """`param NAME = value` declarations in order (values as Python literals where they are literals)."""
    out: dict[str, object] = {}
    for rx in (_PARAM, _PY_PARAM):
        for m in rx.finditer(text):
            out.setdefault(m.group("name"), literal(m.group("value")))
    return out


def set_param_default(text: str, name: str, value: object) -> str:
    """The text with the default of param `name` replaced (comments kept)."""
    for rx in (_PARAM, _PY_PARAM):
        hit = [m for m in rx.finditer(text) if m.group("name") == name]
        if hit:
            m = hit[0]
            v = format_value(value)
            start, end = m.span("value")
            return text[:start] + v + text[end:]
    raise SourceError(f"no param named {name}")


def add_param(text: str, name: str, value: object) -> str:
    """Declare a new param after the last existing one (or first in the kernel body)."""
    if name in declared_params(text):
        return set_param_default(text, name, value)
    lines = text.splitlines(keepends=True)
    last = None
    for i, line in enumerate(lines):
        if _PARAM.match(line.rstrip("\n")):
            last = i
    if last is None:
        body = kernel_body(text)
        at, indent = body.start, body.indent
    else:
        at, indent = last + 1, _PARAM.match(lines[last].rstrip("\n")).group("indent")
    lines.insert(at, f"{indent}param {name} = {format_value(value)}\n")
    return "".join(lines)


@dataclass(frozen=True)
class Body:
    start: int  # index of the first body line
    end: int  # one past the last body line (the reference: block or the end of the text)
    indent: str


def kernel_body(text: str) -> Body:
    lines = text.splitlines()
    head = next((i for i, ln in enumerate(lines) if re.match(r"^(kernel|def)\s+\w+\s*\(", ln)), None)
    if head is None:
        raise SourceError("no kernel header")
    i = head
    while not lines[i].rstrip().endswith(":"):  # a header may span lines
        i += 1
    start = i + 1
    indent = None
    end = len(lines)
    for j in range(start, len(lines)):
        ln = lines[j]
        if not ln.strip() or ln.lstrip().startswith("#"):
            continue
        ind = ln[: len(ln) - len(ln.lstrip())]
        if indent is None:
            indent = ind
        if not ind:  # back at column 0: reference: or the next kernel
            end = j
            break
    if indent is None:
        raise SourceError("empty kernel body")
    while end > start and not lines[end - 1].strip():
        end -= 1
    return Body(start, end, indent)


def split_top(s: str, sep: str = ",") -> list[str]:
    """Split at `sep` outside brackets and quotes."""
    out, depth, cur, quote = [], 0, [], None
    for ch in s:
        if quote:
            cur.append(ch)
            if ch == quote:
                quote = None
            continue
        if ch in "\"'":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == sep and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return [x.strip() for x in out]


def matching_paren(s: str, open_at: int) -> int:
    depth = 0
    for i in range(open_at, len(s)):
        if s[i] in "([{":
            depth += 1
        elif s[i] in ")]}":
            depth -= 1
            if depth == 0:
                return i
    raise SourceError("unbalanced parentheses")


@dataclass(frozen=True)
class Launch:
    line: int  # line index
    grid: tuple[str, ...]  # grid expressions as text
    rest: tuple[tuple[str, str], ...]  # the other keywords (threads=, warpgroups=, cluster=) in order
    indent: str

    def render(self) -> str:
        grid = "(" + ", ".join(self.grid) + ("," if len(self.grid) == 1 else "") + ")"
        kws = [f"grid={grid}"] + [f"{k}={v}" for k, v in self.rest]
        return f"{self.indent}launch " + ", ".join(kws)


def find_launch(text: str) -> Launch:
    lines = text.splitlines()
    for i, ln in enumerate(lines):
        m = re.match(r"^([ \t]*)launch\b[ \t]*(.*?)[ \t]*(#.*)?$", ln)
        if not m:
            continue
        body = m.group(2)
        if body.startswith("(") and matching_paren(body, 0) == len(body) - 1:
            body = body[1:-1]
        kws = []
        for part in split_top(body):
            if "=" not in part:
                raise SourceError(f"cannot read launch keyword {part!r}")
            k, v = part.split("=", 1)
            kws.append((k.strip(), v.strip()))
        grid = next((v for k, v in kws if k == "grid"), None)
        if grid is None or not (grid.startswith("(") and grid.endswith(")")):
            raise SourceError("launch without a grid=(...) tuple")
        g = tuple(x for x in split_top(grid[1:-1]) if x)
        return Launch(i, g, tuple((k, v) for k, v in kws if k != "grid"), m.group(1))
    raise SourceError("no launch statement")


def replace_line(text: str, index: int, new: str | list[str]) -> str:
    lines = text.splitlines()
    lines[index: index + 1] = [new] if isinstance(new, str) else new
    return "\n".join(lines) + "\n"


def find_assign(text: str, name_pattern: str, rhs_pattern: str) -> int | None:
    """Index of the first line `<name matching name_pattern> = <rhs matching rhs_pattern>`."""
    rx = re.compile(rf"^[ \t]*{name_pattern}[ \t]*=[ \t]*{rhs_pattern}[ \t]*(#.*)?$")
    for i, ln in enumerate(text.splitlines()):
        if rx.match(ln):
            return i
    return None
