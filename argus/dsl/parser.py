"""Lark parser for Argus source: text -> AST (argus.dsl.ast), with readable syntax errors."""

from __future__ import annotations

import functools
import re
from pathlib import Path

from lark import Lark, Token, Transformer, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken
from lark.indenter import DedentError, Indenter

from argus.dsl import ast
from argus.dsl.bounds import check_nesting, float_literal, int_literal
from argus.dsl.diagnostics import SOURCES, ArgusError, Diagnostic, Span, error


class _ArgusIndenter(Indenter):
    NL_type = "_NL"
    OPEN_PAREN_types = ["LPAR", "LSQB"]
    CLOSE_PAREN_types = ["RPAR", "RSQB"]
    INDENT_type = "_INDENT"
    DEDENT_type = "_DEDENT"
    tab_len = 8


@functools.lru_cache(maxsize=1)
def _lark() -> Lark:
    # The LALR tables are built here or read from the per-user JSON cache (never from a pickle in a
    # shared temp directory: see argus/dsl/tables.py).
    from argus.dsl.tables import load_parser

    grammar = (Path(__file__).parent / "grammar.lark").read_text()
    return load_parser(grammar, postlex=_ArgusIndenter(), propagate_positions=True, maybe_placeholders=True)


def _span(path: str, meta) -> Span:
    return Span(path, meta.line, meta.column, meta.end_line, meta.end_column)


def _tok_span(path: str, tok: Token) -> Span:
    return Span(path, tok.line, tok.column, tok.end_line or tok.line,
                tok.end_column or tok.column + len(str(tok)))


@v_args(meta=True)
class _ToAst(Transformer):
    def __init__(self, path: str):
        super().__init__()
        self.path = path

    def _s(self, meta) -> Span:
        return _span(self.path, meta)

    # ---- top level ----
    def start(self, meta, items):
        span = self._s(meta) if not meta.empty else Span(self.path, 1, 1, 1, 1)
        kernels = tuple(i for i in items if isinstance(i, ast.Kernel))
        layers = tuple(i for i in items if isinstance(i, ast.Layer))
        seen: dict[str, ast.Node] = {}
        for item in (*kernels, *layers):
            if item.name in seen:
                raise error("duplicate-name", f"'{item.name}' is declared twice in this file", item.name_span)
            seen[item.name] = item
        return ast.Module(span, self.path, kernels, layers)

    def layer(self, meta, items):
        name, args, body, ref = items
        return ast.Layer(self._s(meta), str(name), tuple(args or ()), tuple(body), tuple(ref),
                         _tok_span(self.path, name))

    def kernel(self, meta, items):
        name, args, body, ref = items
        body = list(body)
        # Python spelling of the reference block: a final `with reference:` in the body.
        if body and isinstance(body[-1], ast.With) and isinstance(body[-1].context, ast.Name) \
                and body[-1].context.id == "reference":
            if ref is not None:
                raise error("syntax", "the kernel has two reference blocks", body[-1].span)
            ref = tuple(body.pop().body)
        return ast.Kernel(self._s(meta), str(name), tuple(args or ()), tuple(body), ref,
                          _tok_span(self.path, name))

    def args(self, meta, items):
        return list(items)

    def arg(self, meta, items):
        name, (dtype, dims, dtype_span), default = items
        return ast.Arg(self._s(meta), str(name), dtype, dims, default, dtype_span)

    def tensor_type(self, meta, items):
        name, dims = items
        return (str(name), tuple(dims), self._s(meta))

    def scalar_type(self, meta, items):
        return (str(items[0]), None, self._s(meta))

    def string_type(self, meta, items):
        text = str(items[0])[1:-1]
        m = re.fullmatch(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:\[([^\]]*)\])?\s*", text)
        if m is None:
            raise error("syntax", f"cannot read the type {text!r}", self._s(meta),
                        "write a type as \"bf16[M, K]\" or \"f32\"")
        dims = None
        if m.group(2) is not None:
            dims = tuple(int_literal(d.strip(), self._s(meta)) if d.strip().isdigit() else d.strip()
                         for d in m.group(2).split(",") if d.strip())
            if any(isinstance(d, str) and not d.isidentifier() for d in dims):
                raise error("syntax", f"dimensions are names or integers: {text!r}", self._s(meta))
        return (m.group(1), dims, self._s(meta))

    def dims(self, meta, items):
        return list(items)

    def dim(self, meta, items):
        tok = items[0]
        return int_literal(tok, _tok_span(self.path, tok)) if tok.type == "INT" else str(tok)

    def reference(self, meta, items):
        return tuple(items[0])

    def suite(self, meta, items):
        out = []
        for it in items:
            out.extend(it if isinstance(it, list) else [it])
        return out

    # ---- statements ----
    def simple_stmt(self, meta, items):
        return list(items)

    def param_stmt(self, meta, items):
        name, annot, value = items
        return ast.Param(self._s(meta), str(name), str(annot) if annot else None, value)

    def specialize_stmt(self, meta, items):
        return ast.Specialize(self._s(meta), items[0], tuple(items[1:]))

    def launch_stmt(self, meta, items):
        return ast.Launch(self._s(meta), tuple(items))

    def launch_kw(self, meta, items):
        return ast.Keyword(self._s(meta), str(items[0]), items[1])

    def assign(self, meta, items):
        targets, value = items
        # Python spelling of a param: `BM = param(128)`.
        if len(targets) == 1 and isinstance(value, ast.Call) and value.func_name == "param":
            if len(value.args) != 1 or value.kwargs:
                raise error("syntax", "param takes its default value: BM = param(128)", value.span)
            return ast.Param(self._s(meta), targets[0].id, None, value.args[0])
        return ast.Assign(self._s(meta), tuple(targets), value)

    def rhs(self, meta, items):
        return items[0] if len(items) == 1 else ast.TupleExpr(self._s(meta), tuple(items))

    def targets(self, meta, items):
        return list(items)

    def name_target(self, meta, items):
        return ast.Name(self._s(meta), str(items[0]))

    def aug_assign(self, meta, items):
        name, op, value = items
        target = ast.Name(_tok_span(self.path, name), str(name))
        return ast.AugAssign(self._s(meta), target, str(op)[:-1], value)

    def expr_stmt(self, meta, items):
        e = items[0]
        # Python spelling of launch: `launch(grid=(...), threads=256)`.
        if isinstance(e, ast.Call) and e.func_name == "launch":
            if e.args:
                raise error("syntax", "launch takes keyword options only: launch(grid=(...), threads=N)", e.span)
            return ast.Launch(self._s(meta), e.kwargs)
        return ast.ExprStmt(self._s(meta), e)

    def pass_stmt(self, meta, items):
        return ast.Pass(self._s(meta))

    def for_stmt(self, meta, items):
        var, it, body = items
        return ast.For(self._s(meta), str(var), _tok_span(self.path, var), it, tuple(body))

    def if_stmt(self, meta, items):
        cond, body, elifs, orelse = items
        tail: tuple = tuple(orelse or ())
        for e_cond, e_body, e_span in reversed(elifs):
            tail = (ast.If(e_span, e_cond, tuple(e_body), tail),)
        return ast.If(self._s(meta), cond, tuple(body), tail)

    def elifs(self, meta, items):
        return list(items)

    def elif_(self, meta, items):
        return (items[0], items[1], self._s(meta))

    def with_stmt(self, meta, items):
        return ast.With(self._s(meta), items[0], tuple(items[1]))

    # ---- expressions ----
    def lambda_(self, meta, items):
        *params, body = items
        return ast.Lambda(self._s(meta), tuple(str(p) for p in params), body)

    def ifexp(self, meta, items):
        then, cond, orelse = items
        return ast.IfExp(self._s(meta), cond, then, orelse)

    def or_op(self, meta, items):
        return ast.BoolOp(self._s(meta), "or", items[0], items[1])

    def and_op(self, meta, items):
        return ast.BoolOp(self._s(meta), "and", items[0], items[1])

    def not_op(self, meta, items):
        return ast.UnaryOp(self._s(meta), "not", items[0])

    def compare(self, meta, items):
        return ast.Compare(self._s(meta), str(items[1]), items[0], items[2])

    def binop(self, meta, items):
        return ast.BinOp(self._s(meta), str(items[1]), items[0], items[2])

    def binop_or(self, meta, items):
        return ast.BinOp(self._s(meta), "|", items[0], items[1])

    def binop_xor(self, meta, items):
        return ast.BinOp(self._s(meta), "^", items[0], items[1])

    def binop_and(self, meta, items):
        return ast.BinOp(self._s(meta), "&", items[0], items[1])

    def pow(self, meta, items):
        return ast.BinOp(self._s(meta), "**", items[0], items[2])

    def neg(self, meta, items):
        return ast.UnaryOp(self._s(meta), "-", items[0])

    def invert(self, meta, items):
        return ast.UnaryOp(self._s(meta), "~", items[0])

    def call(self, meta, items):
        func, args = items
        pos, kws = [], []
        for a in args or ():
            if isinstance(a, ast.Keyword):
                kws.append(a)
            else:
                if kws:
                    raise error("syntax", "positional argument after a keyword argument", a.span,
                                "move positional arguments before keyword arguments")
                pos.append(a)
        return ast.Call(self._s(meta), func, tuple(pos), tuple(kws))

    def call_args(self, meta, items):
        return list(items)

    def kwarg(self, meta, items):
        return ast.Keyword(self._s(meta), str(items[0]), items[1])

    def subscript(self, meta, items):
        return ast.Subscript(self._s(meta), items[0], tuple(items[1]))

    def subscripts(self, meta, items):
        return list(items)

    def slice_range(self, meta, items):
        return ast.Slice(self._s(meta) if not meta.empty else Span(self.path, 0, 0, 0, 0),
                         items[0], items[1])

    def slice_len(self, meta, items):
        return ast.Slice(self._s(meta), items[0], None, items[1])

    def attribute(self, meta, items):
        return ast.Attribute(self._s(meta), items[0], str(items[1]))

    def param_call(self, meta, items):
        span = self._s(meta)
        return ast.Call(span, ast.Name(span, "param"), (items[0],), ())

    def name(self, meta, items):
        return ast.Name(self._s(meta), str(items[0]))

    def int_(self, meta, items):
        return ast.Const(self._s(meta), int_literal(items[0], self._s(meta)))

    def float_(self, meta, items):
        return ast.Const(self._s(meta), float_literal(items[0], self._s(meta)))

    def string(self, meta, items):
        return ast.Const(self._s(meta), str(items[0])[1:-1])

    def true_(self, meta, items):
        return ast.Const(self._s(meta), True)

    def false_(self, meta, items):
        return ast.Const(self._s(meta), False)

    def none_(self, meta, items):
        return ast.Const(self._s(meta), None)

    def tuple_(self, meta, items):
        return ast.TupleExpr(self._s(meta), tuple(i for i in items if i is not None))

    def list_(self, meta, items):
        return ast.TupleExpr(self._s(meta), tuple(i for i in items if i is not None), is_list=True)


# ---- syntax errors a person can act on ----
_TOKEN_WORDS = {
    "COLON": "':'", "LPAR": "'('", "RPAR": "')'", "LSQB": "'['", "RSQB": "']'", "COMMA": "','",
    "EQUAL": "'='", "NAME": "a name", "INT": "an integer", "FLOAT": "a number", "STRING": "a string",
    "_NL": "end of line", "_INDENT": "an indented block", "_DEDENT": "end of block", "$END": "end of file",
    "DOT": "'.'", "PLUS": "'+'", "MINUS": "'-'", "SEMICOLON": "';'", "COMPOP": "a comparison",
    "ADDOP": "'+' or '-'", "MULOP": "an operator", "KERNEL": "'kernel'", "LAMBDA": "'lambda'",
}
_HEADERS = ("kernel", "layer", "for", "if", "elif", "else", "with", "reference")


def _describe(tok: Token | None) -> str:
    if tok is None or tok.type == "$END":
        return "end of file"
    if tok.type == "_NL":
        return "end of line"
    if tok.type in ("_INDENT", "_DEDENT"):
        return "a change of indentation"
    return f"'{tok}'"


def _syntax_diag(path: str, text: str, exc: UnexpectedInput) -> Diagnostic:
    lines = text.splitlines()
    line = getattr(exc, "line", None) or len(lines) or 1
    col = getattr(exc, "column", None) or 1
    if line < 1 or line == -1:
        line, col = max(1, len(lines)), max(1, len(lines[-1]) + 1 if lines else 1)
    tok = getattr(exc, "token", None)
    expected = set(getattr(exc, "expected", None) or getattr(exc, "allowed", None) or ())
    if isinstance(tok, Token) and tok.type == "_NL":
        # Lark places newline tokens at the end of the previous line; point just past its text.
        prev = lines[line - 1] if 0 < line <= len(lines) else ""
        col = len(prev.split("#")[0].rstrip()) + 1
    width = len(str(tok)) if isinstance(tok, Token) and tok.type not in ("_NL", "_DEDENT", "_INDENT") else 1
    span = Span(path, line, col, line, col + max(1, width))
    src_line = lines[line - 1].strip() if 0 < line <= len(lines) else ""
    header = next((h for h in _HEADERS if src_line.startswith(h + " ") or src_line.startswith(h + ":")
                   or src_line == h), None)
    notes: list[str] = []
    if isinstance(exc, UnexpectedCharacters):
        ch = lines[line - 1][col - 1] if 0 < line <= len(lines) and col - 1 < len(lines[line - 1]) else "?"
        msg = f"unexpected character '{ch}'"
        notes.append("Argus accepts names, numbers, strings, operators and brackets as in Python")
        return Diagnostic("error", "syntax", msg, span, tuple(notes))
    if isinstance(tok, Token) and tok.type == "_INDENT":
        # The indent token sits at the end of the previous line; point at the indented line instead.
        nxt = next((i for i in range(line + 1, len(lines) + 1) if lines[i - 1].strip()), line)
        ind = len(lines[nxt - 1]) - len(lines[nxt - 1].lstrip())
        return Diagnostic("error", "syntax", "unexpected indentation", Span(path, nxt, ind + 1, nxt, ind + 2),
                          ("indent only the body of a kernel, loop, if, with or reference block",))
    prev = next((lines[i - 1] for i in range(line - 1, 0, -1) if lines[i - 1].split("#")[0].strip()), "")
    this = lines[line - 1] if 0 < line <= len(lines) else ""
    this_ind, prev_ind = len(this) - len(this.lstrip()), len(prev) - len(prev.lstrip())
    if prev.split("#")[0].rstrip().endswith(":") and this_ind <= prev_ind and col == this_ind + 1:
        return Diagnostic("error", "syntax", "expected an indented block", span,
                          ("the line after a ':' header must be indented further than the header",))
    opened = _unclosed_bracket(lines, line, col)
    if opened is not None and opened[0] < line and col == len(this) - len(this.lstrip()) + 1:
        ch, oline = opened[2], opened[0]
        closer = {"(": "')'", "[": "']'"}[ch]
        return Diagnostic("error", "syntax", f"expected {closer}: the '{ch}' opened on line {oline} is never closed",
                          span, (f"close the bracket opened at line {oline}, column {opened[1]}",))
    if "COLON" in expected and header:
        what = {"kernel": "kernel signature", "layer": "layer signature", "reference": "'reference'"}.get(
            header, f"'{header}' header")
        return Diagnostic("error", "syntax", f"expected ':' after {what}", span,
                          (f"write the header as in Python, ending with ':' (found {_describe(tok)})",))
    if "_INDENT" in expected:
        return Diagnostic("error", "syntax", "expected an indented block", span,
                          ("the line after a ':' header must be indented further than the header",))
    if expected and expected <= {"REFERENCE", "_NL"}:  # only after a layer's params
        at_end = not isinstance(tok, Token) or tok.type == "$END"
        last = next((i for i in range(len(lines), 0, -1) if lines[i - 1].strip()), 1) if at_end else line
        at = Span(path, last + 1, 1, last + 1, 2) if at_end else span
        return Diagnostic("error", "syntax", "a layer needs a 'reference:' block after its params", at,
                          ("add `reference:` at the layer's indentation, then the float64 computation of its "
                           "outputs",))
    if isinstance(tok, Token) and tok.type in ("_NL", "$END") and expected & {"RPAR", "RSQB"}:
        closer = "')'" if "RPAR" in expected else "']'"
        return Diagnostic("error", "syntax", f"expected {closer} before {_describe(tok)}", span,
                          ("a bracket opened on this line or above is never closed",))
    if isinstance(tok, Token) and tok.type in ("_NL", "$END"):
        return Diagnostic("error", "syntax", "incomplete statement: the line ends in the middle of an expression",
                          span, ("complete the expression or remove the trailing operator",))
    if isinstance(tok, Token) and tok.type == "COLON" and opened_here(lines, line, col) == "[":
        return Diagnostic("error", "syntax", "a slice with a step (a[:, 0::2], a[i : j : 2]) is not supported", span,
                          ("kernel and reference slices take start : stop or start : +length, unit stride",))
    if isinstance(tok, Token) and tok.type == "EQUAL":
        return Diagnostic("error", "syntax", "cannot assign here", span,
                          ("only names can be assigned (a = ..., a, b = ...); use '==' to compare",))
    if src_line.startswith("kernel") and "LPAR" in expected:
        return Diagnostic("error", "syntax", "expected '(' after the kernel name", span,
                          ("a kernel is declared as: kernel name(A: bf16[M, K], ...):",))
    if not src_line.startswith("kernel") and line <= len(lines) and not lines[line - 1].startswith((" ", "\t")) \
            and "KERNEL" in expected:
        return Diagnostic("error", "syntax", "expected 'kernel' or 'layer' at the top level", span,
                          ("a file holds kernel definitions, each optionally followed by a 'reference:' block, and "
                           "layers (a signature, params and a 'reference:' block)",))
    nice = sorted({_TOKEN_WORDS.get(e, f"'{e.lower()}'") for e in expected if not e.startswith("__")})
    exp = ", ".join(nice[:6]) + (", ..." if len(nice) > 6 else "")
    msg = f"unexpected {_describe(tok) if isinstance(tok, Token) else 'input'}"
    return Diagnostic("error", "syntax", msg, span, (f"expected one of: {exp}",) if exp else ())


def opened_here(lines: list[str], line: int, col: int) -> str | None:
    """The innermost bracket open at (line, col), when it was opened on that line."""
    got = _unclosed_bracket(lines, line, col)
    return got[2] if got is not None and got[0] == line else None


def _unclosed_bracket(lines: list[str], line: int, col: int) -> tuple[int, int, str] | None:
    """The innermost bracket still open at (line, col), ignoring strings and comments."""
    stack: list[tuple[int, int, str]] = []
    for i, text in enumerate(lines[:line], 1):
        quote = None
        for j, ch in enumerate(text, 1):
            if i == line and j >= col:
                break
            if quote:
                quote = None if ch == quote else quote
            elif ch in "'\"":
                quote = ch
            elif ch == "#":
                break
            elif ch in "([":
                stack.append((i, j, ch))
            elif ch in ")]" and stack:
                stack.pop()
    return stack[-1] if stack else None


def parse(text: str, path: str = "<string>", register: bool = True) -> ast.Module:
    """Parse Argus source into an AST; raises ArgusError with a located diagnostic.

    `register` records the text for quoting in diagnostics (off when the caller registers the
    enclosing file itself, as @argus.kernel does).
    """
    if register:
        SOURCES.add(path, text)
    if not text.endswith("\n"):
        text += "\n"
    try:
        tree = _lark().parse(text)
    except (UnexpectedToken, UnexpectedCharacters, UnexpectedEOF) as exc:
        raise ArgusError(_syntax_diag(path, text, exc)) from None
    except DedentError as exc:
        # Lark's message is "Unexpected dedent to column N. Expected dedent to M"; find the line.
        line = _find_bad_dedent(text)
        raise error("syntax", "inconsistent indentation: this line matches no enclosing block",
                    Span(path, line, 1, line, 2), f"({exc}); indent it like the block it belongs to") from None
    check_nesting(tree, path)  # before the (recursive) tree walks below
    try:
        return _ToAst(path).transform(tree)
    except Exception as exc:  # VisitError wraps our ArgusError
        inner = getattr(exc, "orig_exc", exc)
        if isinstance(inner, ArgusError):
            raise inner from None
        raise


def _find_bad_dedent(text: str) -> int:
    stack = [0]
    depth = 0
    for i, raw in enumerate(text.splitlines(), 1):
        stripped = raw.split("#")[0]
        if not stripped.strip():
            continue
        depth += stripped.count("(") + stripped.count("[") - stripped.count(")") - stripped.count("]")
        ind = len(raw) - len(raw.lstrip(" \t"))
        if ind > stack[-1]:
            stack.append(ind)
        else:
            while ind < stack[-1]:
                stack.pop()
            if ind != stack[-1]:
                return i
    return 1


def parse_file(path: str | Path) -> ast.Module:
    from argus.files import read_source

    return parse(read_source(path), str(path))
