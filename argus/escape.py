"""Untrusted text (source lines, model replies, messages quoting them) made safe for where it is shown.

- `terminal`: control characters (ANSI escape sequences start with ESC), DEL, C1 controls and the
  Unicode bidirectional overrides are shown as visible escapes (`\\x1b`, `\\u202e`), so a program or a
  model reply cannot move the cursor, recolour or rewrite what the user sees.
- `markdown_cell` / `markdown`: HTML is escaped (report.md is rendered), `|` cannot end a table cell,
  and a fenced block gets a fence longer than any backtick run inside it.
"""

from __future__ import annotations

import html
import re

# C0 controls except newline and tab, DEL, C1 controls, bidi embeddings/overrides/isolates, line/para separators
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _visible(m: re.Match) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def terminal(text: str, keep_newlines: bool = True) -> str:
    out = _UNSAFE.sub(_visible, text)
    return out if keep_newlines else out.replace("\n", "\\n")


def markdown(text: str) -> str:
    """Inline text for a markdown paragraph or list item: no raw HTML, no control characters."""
    return html.escape(terminal(text), quote=False)


def markdown_cell(text: str, limit: int | None = None) -> str:
    """One table cell: a single line, `|` escaped, HTML escaped."""
    flat = " ".join(terminal(str(text)).split())
    if limit is not None and len(flat) > limit:
        flat = flat[: limit - 1] + "…"
    return html.escape(flat, quote=False).replace("|", "\\|")


def fence(body: str, lang: str = "") -> str:
    """A fenced code block that the body cannot close early."""
    longest = max((len(r) for r in re.findall(r"`+", body)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{lang}\n{terminal(body)}\n{ticks}"
