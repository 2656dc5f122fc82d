"""Bounds on what a program may ask of the front end, so that no input can exhaust it.

Every later stage (the AST transformer, the checker, lowering, the interpreter, the verifier and the
code generator) walks expressions and blocks recursively, so their nesting is bounded here, right
after parsing, with a located error instead of a RecursionError deep inside. Literals are bounded
before Python converts them (a 5001-digit integer is refused, not turned into a ValueError), and
compile-time arithmetic cannot build numbers far beyond 64 bits (`9 ** 9 ** 9` would take hours).
"""

from __future__ import annotations

import math

from lark import Token, Tree

from argus.dsl.diagnostics import Span, error

MAX_TREE_DEPTH = 200  # parse-tree nesting; the example kernels reach 25
MAX_BLOCK_DEPTH = 32  # nested for / if / with blocks
MAX_INT_DIGITS = 20  # 2**64 has 20 decimal digits
MAX_FLOAT_CHARS = 64
CONST_BITS = 64  # compile-time integers live in [-2**64, 2**64]


def int_literal(tok: Token | str, span: Span) -> int:
    text = str(tok)
    digits = text[2:] if text[:2].lower() == "0x" else text
    limit = MAX_INT_DIGITS if digits is text else MAX_INT_DIGITS - 4
    if len(digits.lstrip("0")) > limit:
        raise error("literal", f"integer literal of {len(digits)} digits is too large", span,
                    f"integers in Argus fit in {CONST_BITS} bits (at most {MAX_INT_DIGITS} decimal digits)")
    return int(text, 0)


def float_literal(tok: Token | str, span: Span) -> float:
    text = str(tok)
    if len(text) > MAX_FLOAT_CHARS:
        raise error("literal", f"float literal of {len(text)} characters is too long", span,
                    f"write it with an exponent, in at most {MAX_FLOAT_CHARS} characters")
    value = float(text)
    if not math.isfinite(value):
        raise error("literal", f"float literal {text} is out of range (it overflows to infinity)", span)
    return value


def _span(path: str, node: Tree | Token) -> Span | None:
    if isinstance(node, Token):
        return Span(path, node.line or 1, node.column or 1, node.end_line or node.line or 1,
                    node.end_column or (node.column or 1) + len(node))
    m = node.meta
    if getattr(m, "empty", True):
        return None
    return Span(path, m.line, m.column, m.end_line, m.end_column)


def check_nesting(tree: Tree, path: str) -> None:
    """Refuse a parse tree nested deeper than the later (recursive) stages can walk."""
    stack: list[tuple[Tree | Token, int, int, Span | None]] = [(tree, 1, 0, None)]
    while stack:
        node, depth, blocks, where = stack.pop()
        if not isinstance(node, Tree):
            continue
        here = _span(path, node) or where
        if node.data == "suite":
            blocks += 1
            if blocks > MAX_BLOCK_DEPTH:
                raise error("nesting", f"blocks are nested more than {MAX_BLOCK_DEPTH} deep", here,
                            "move the inner code into fewer levels (combine conditions with 'and')")
        if depth > MAX_TREE_DEPTH:
            raise error("nesting", f"this expression or statement is nested more than {MAX_TREE_DEPTH} levels deep",
                        here, "split it with intermediate names (x = ...; y = x + ...)")
        stack.extend((c, depth + 1, blocks, here) for c in node.children)


def fold_binary(op: str, a, b):
    """Compile-time `a op b`; raises OverflowError when the result would leave the bounds above
    (checked before computing the operations that can explode: ** and <<)."""
    ints = isinstance(a, int) and isinstance(b, int)
    if op == "**" and ints and b > 0 and abs(a) > 1 and b * math.log2(abs(a)) > CONST_BITS + 1:
        raise OverflowError(f"{a} ** {b} has more than {CONST_BITS} bits")
    if op == "<<" and ints and b > CONST_BITS:
        raise OverflowError(f"{a} << {b} has more than {CONST_BITS} bits")
    if op in ("<<", ">>") and ints and b < 0:
        raise ValueError("negative shift count")
    if op == "**" and not ints and isinstance(b, (int, float)) and abs(b) > 1e6:
        raise OverflowError("exponent out of range")
    if op == "/" and b == 0:
        raise ZeroDivisionError("division by zero")
    result = {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "/": lambda: a / b,
              "//": lambda: a // b, "%": lambda: a % b, "**": lambda: a ** b, "<<": lambda: a << b,
              ">>": lambda: a >> b, "&": lambda: a & b, "|": lambda: a | b, "^": lambda: a ^ b}[op]()
    if isinstance(result, int) and abs(result) > 1 << CONST_BITS:
        raise OverflowError(f"the result has {result.bit_length()} bits (more than {CONST_BITS})")
    if isinstance(result, complex) or (isinstance(result, float) and not math.isfinite(result)):
        raise OverflowError("the result is not a finite real number")
    return result
