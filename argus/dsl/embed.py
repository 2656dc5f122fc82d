"""Kernels inside Python: `@argus.kernel` on a `def` whose body is Argus source, and `argus.load(path)`.

The decorated function is never executed: its source is read with `inspect`, and parsed with the same
grammar as a `.arg` file. Python spellings the grammar accepts: `def` for `kernel`, `BM = param(128)`,
`launch(grid=..., threads=...)`, string annotations `A: "bf16[M, K]"` (or plain ones under
`from __future__ import annotations`), and a final `with reference:` block. Diagnostics point at the
line of the `.py` file.
"""

from __future__ import annotations

import inspect
import textwrap
from pathlib import Path

from argus.dsl import ast
from argus.dsl.diagnostics import SOURCES, error
from argus.dsl.parser import parse, parse_file


def source_of_function(fn) -> tuple[ast.Module, str]:
    text, path = function_text(fn)
    return parse(text, path, register=False), path


def function_text(fn) -> tuple[str, str]:
    """The Argus text of a decorated function -- its lines with decorators blanked, dedented, after blank
    lines up to its first line (so spans are lines of the .py) -- and the file it comes from."""
    try:
        lines, first = inspect.getsourcelines(fn)
        path = inspect.getsourcefile(fn) or "<python>"
    except (OSError, TypeError):
        raise error("io", f"cannot read the source of {getattr(fn, '__name__', fn)!r}", None,
                    "@argus.kernel needs a function defined in a file (not typed at the REPL)") from None
    text = "".join(lines)
    # drop the decorators (which may span lines) but keep line numbers: blank everything before the def
    out = []
    seen_def = False
    for line in text.splitlines(keepends=True):
        seen_def = seen_def or line.lstrip().startswith("def ")
        out.append(line if seen_def else "\n")
    body = textwrap.dedent("".join(out))
    padded = "\n" * (first - 1) + body
    try:
        SOURCES.add(path, Path(path).read_text())
    except (OSError, ValueError):  # unreadable, or not UTF-8: quote the function's own lines
        SOURCES.add(path, padded)
    return padded, path


def module_from_path(path: str | Path) -> ast.Module:
    return parse_file(path)
