"""What a FILE argument names: an Argus source (`.arg`) or a Python file (`.py`) of `@argus.kernel` definitions.

A `.py` file is imported (its module-level code runs, as `python FILE` would run it, except that
`__name__` is not `"__main__"`): the kernels are the `argus.Kernel` objects defined in that file, in
source order, with the parameters their decorators bind (`@argus.kernel(BM=64)`). Anything the import
raises becomes a diagnostic at the line of the file that raised it. Every other suffix is Argus source.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import itertools
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from argus.dsl import ast, parser
from argus.dsl.diagnostics import ArgusError, Span, error
from argus.files import MAX_SOURCE_BYTES, read_regular, read_source
from argus.ir import nodes as ir
from argus.ir.build import build_kernel, select_kernel


@dataclass(frozen=True)
class KernelSource:
    """One kernel of a file: its AST, the params its decorator binds, and its Argus text (the whole file
    for `.arg`; the function's lines, line numbers kept, for `.py`), which `argus tune` rewrites."""

    node: ast.Kernel
    params: dict[str, object] = field(default_factory=dict)
    text: str = ""

    @property
    def name(self) -> str:
        return self.node.name

    def defines(self, defines: dict[str, object] | None = None) -> dict[str, object]:
        """The decorator's params overridden by `defines` (-D on the command line)."""
        return {**self.params, **(defines or {})}

    def build(self, defines: dict[str, object] | None = None) -> ir.Kernel:
        return build_kernel(self.node, self.defines(defines))


@dataclass(frozen=True)
class SourceFile:
    path: str
    kernels: tuple[KernelSource, ...]
    layers: tuple[ast.Layer, ...] = ()
    span: Span | None = None

    def select(self, name: str | None) -> KernelSource:
        """The kernel called `name` (the first when None), with the compiler's errors for a bad name."""
        module = ast.Module(self.span or Span(self.path, 1, 1, 1, 1), self.path,
                            tuple(k.node for k in self.kernels), self.layers)
        node = select_kernel(module, name)
        return next(k for k in self.kernels if k.node is node)

    def build(self, name: str | None, defines: dict[str, object] | None = None) -> ir.Kernel:
        return self.select(name).build(defines)


def is_python(path: str | Path) -> bool:
    return str(path).endswith(".py")


def load_source(path: str | Path) -> SourceFile:
    if is_python(path):
        return _python_file(str(path))
    # read once, through argus.files (a regular file below the size limit, UTF-8; a FIFO, a device or
    # undecodable bytes are clean diagnostics), and parsed from that same text
    text = read_source(path)
    module = parser.parse(text, str(path))
    return SourceFile(str(path), tuple(KernelSource(k, {}, text) for k in module.kernels), module.layers,
                      module.span)


def build_file(path: str | Path, defines: dict[str, object] | None = None, kernel: str | None = None) -> ir.Kernel:
    """argus.ir.build.build_file for `.arg` and `.py` files alike."""
    return load_source(path).build(kernel, defines)


_COUNTER = itertools.count()


def _python_file(path: str) -> SourceFile:
    from argus.api import Kernel

    p = Path(path)
    read_regular(path, MAX_SOURCE_BYTES, "Python file")  # exists, a regular file (not a FIFO), not huge
    name = f"_argus_file_{next(_COUNTER)}_{''.join(c if c.isalnum() else '_' for c in p.stem)}"
    # A loader of our own keeps the path as given (spec_from_file_location would make it absolute): the
    # functions' code, and so their kernels' spans and diagnostics, name the file as the user did.
    spec = importlib.util.spec_from_file_location(name, path, loader=importlib.machinery.SourceFileLoader(name, path))
    if spec is None or spec.loader is None:
        raise error("io", f"cannot import {path}", None)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look a module up by name while it runs
    sys.path.insert(0, str(p.parent.resolve()))  # sibling imports work as under `python FILE`
    try:
        spec.loader.exec_module(module)
    except ArgusError:
        raise  # a kernel that does not parse: already located in the file
    except SyntaxError as exc:
        line = exc.lineno or 1
        raise error("python", f"{path} is not valid Python: {exc.msg}",
                    Span(exc.filename or path, line, exc.offset or 1, line, (exc.offset or 1) + 1)) from None
    except (Exception, SystemExit) as exc:
        raise error("python", f"importing {path} raised {type(exc).__name__}: {exc}", _raising_line(exc, path),
                    "a .py file given to argus is imported, so its module-level code runs") from None
    finally:
        sys.path.remove(str(p.parent.resolve()))
    found: dict[int, Kernel] = {}
    for value in vars(module).values():
        if isinstance(value, Kernel) and Path(value.node.span.path).resolve() == p.resolve():
            found.setdefault(id(value), value)  # defined in this file (not imported into it), once
    kernels = sorted(found.values(), key=lambda k: k.node.span.line)
    if not kernels:
        raise error("empty", f"no @argus.kernel definition in {path}", Span(path, 1, 1, 1, 1),
                    "decorate a def whose body is Argus source with @argus.kernel (see README, Python)")
    return SourceFile(path, tuple(KernelSource(k.node, dict(k.params), k.text or "") for k in kernels))


def _raising_line(exc: BaseException, path: str) -> Span | None:
    """The innermost traceback line inside `path` (the user's line that raised)."""
    want = Path(path).resolve()
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename and Path(frame.filename).resolve() == want:
            line = frame.lineno
    if line is None:
        return None
    try:
        text = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return None
    src = text[line - 1] if line <= len(text) else ""
    col = len(src) - len(src.lstrip()) + 1
    return Span(path, line, col, line, max(col + 1, len(src.rstrip()) + 1))
