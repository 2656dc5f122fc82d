"""Diagnostics: one renderer for every error the compiler reports.

Human form (like a C compiler):

    path:line:col: error: message [code]
       14 |     acc = mma(a_s[s], b_s[s], acc)
          |           ^^^^^^^^^^^^^^^^^^^^^^^^
      note: ...

JSON form (``--format json``) is a list of objects with the schema documented in README.md:
``{"severity", "code", "message", "span": {"path", "line", "col", "end_line", "end_col"}, "notes": [...]}``.
Lines and columns are 1-based; ``end_col`` is exclusive.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Span:
    """A source range. ``end_col`` is exclusive; a zero-width span marks a point."""

    path: str
    line: int
    col: int
    end_line: int
    end_col: int

    @staticmethod
    def point(path: str, line: int, col: int) -> Span:
        return Span(path, line, col, line, col + 1)

    def to_json(self) -> dict:
        return {"path": self.path, "line": self.line, "col": self.col,
                "end_line": self.end_line, "end_col": self.end_col}


@dataclass(frozen=True)
class Diagnostic:
    severity: str  # "error" | "warning" | "note"
    code: str  # stable machine-readable identifier, e.g. "syntax", "undefined-name"
    message: str
    span: Span | None
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {"severity": self.severity, "code": self.code, "message": self.message,
                "span": self.span.to_json() if self.span else None, "notes": list(self.notes)}


class ArgusError(Exception):
    """An error meant for the user: carries diagnostics, never shown as a traceback by the CLI.

    ``str(err)`` is what ``argus`` prints for it: each diagnostic located (path:line:col), with its source
    line, a caret under the span, the message, its code and notes -- so a Python caller sees the place too.
    ``err.diagnostics`` holds the structured form; ``err.message`` the first diagnostic's bare message.
    """

    def __init__(self, diagnostics: Diagnostic | list[Diagnostic]):
        self.diagnostics = [diagnostics] if isinstance(diagnostics, Diagnostic) else list(diagnostics)
        super().__init__(self.message)

    @property
    def message(self) -> str:
        return self.diagnostics[0].message if self.diagnostics else "error"

    def __str__(self) -> str:
        return render_all(self.diagnostics) if self.diagnostics else "error"

    def __reduce__(self):
        # Subclasses take other constructor arguments: rebuild from the diagnostics and instance state,
        # so an error crosses a process boundary (the tuner's child processes) intact.
        return _restore_error, (type(self), self.diagnostics, dict(self.__dict__))


def _restore_error(cls: type[ArgusError], diagnostics: list[Diagnostic], state: dict) -> ArgusError:
    err = cls.__new__(cls)
    ArgusError.__init__(err, diagnostics)
    err.__dict__.update(state)
    return err


def error(code: str, message: str, span: Span | None, *notes: str) -> ArgusError:
    return ArgusError(Diagnostic("error", code, message, span, tuple(notes)))


@dataclass
class SourceMap:
    """Source texts by path, so diagnostics can quote the offending line."""

    texts: dict[str, str] = field(default_factory=dict)

    def add(self, path: str, text: str) -> None:
        self.texts[path] = text

    def line(self, path: str, line: int) -> str | None:
        text = self.texts.get(path)
        if text is None:
            return None
        lines = text.splitlines()
        return lines[line - 1] if 1 <= line <= len(lines) else None


SOURCES = SourceMap()  # every parsed file registers itself here


MAX_QUOTED = 160  # characters of a source line shown around the caret


def _quote(text: str, col: int, end: int) -> tuple[str, int, int]:
    """The source line as shown (control characters escaped, clipped around the span) and the caret's
    offset and width in it."""
    from argus.escape import terminal

    text = text.rstrip()
    pad = len(terminal(text[: col - 1]))
    width = max(1, len(terminal(text[col - 1: end - 1])))
    shown = terminal(text)
    if len(shown) > MAX_QUOTED:
        start = max(0, min(pad - MAX_QUOTED // 3, len(shown) - MAX_QUOTED))
        clipped = shown[start: start + MAX_QUOTED]
        lead = "..." if start else ""
        shown = lead + clipped + ("..." if start + MAX_QUOTED < len(shown) else "")
        pad = pad - start + len(lead)
        width = max(1, min(width, MAX_QUOTED - (pad - len(lead))))
    return shown, pad, width


def render(diag: Diagnostic, sources: SourceMap = SOURCES) -> str:
    from argus.escape import terminal

    out = []
    loc = f"{terminal(diag.span.path)}:{diag.span.line}:{diag.span.col}: " if diag.span else ""
    out.append(f"{loc}{diag.severity}: {terminal(diag.message, keep_newlines=False)} [{diag.code}]")
    if diag.span is not None:
        text = sources.line(diag.span.path, diag.span.line)
        if text is not None:
            num = str(diag.span.line)
            gutter = " " * (len(num) + 1)
            end = diag.span.end_col if diag.span.end_line == diag.span.line else len(text.rstrip()) + 1
            shown, pad, width = _quote(text, diag.span.col, max(end, diag.span.col + 1))
            out.append(f" {num} | {shown}")
            out.append(f"{gutter} | {' ' * pad}{'^' * width}")
    for note in diag.notes:
        out.extend(f"  {line}" for line in terminal(note).splitlines())
    return "\n".join(out)


def render_all(diags: list[Diagnostic], fmt: str = "text", sources: SourceMap = SOURCES) -> str:
    if fmt == "json":
        return json.dumps([d.to_json() for d in diags], indent=2)
    return "\n".join(render(d, sources) for d in diags)
