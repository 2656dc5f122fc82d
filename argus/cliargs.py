"""argparse types for the bounded numbers the commands take (counts, seeds, time and memory budgets)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TypeVar

from argus.limits import DEFAULT_MEMORY, DEFAULT_TIME_S, format_bytes, parse_memory, parse_seconds

T = TypeVar("T")


def nonnegative(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
    if not 0 <= v < 2 ** 63:
        raise argparse.ArgumentTypeError(f"'{text}': give an integer from 0 to 2**63 - 1")
    return v


def positive(text: str) -> int:
    v = nonnegative(text)
    if v == 0 or v > 1_000_000:
        raise argparse.ArgumentTypeError(f"'{text}': give an integer from 1 to 1000000")
    return v


def _checked(parse: Callable[[str], T]) -> Callable[[str], T]:
    def f(text: str) -> T:
        try:
            return parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    f.__name__ = parse.__name__  # argparse names the type in its messages
    return f


seconds = _checked(parse_seconds)
size = _checked(parse_memory)


def add_limit_options(p: argparse.ArgumentParser) -> None:
    """--time-limit / --memory-limit: the budget of the child process that does a command's work."""
    p.add_argument("--time-limit", type=seconds, default=DEFAULT_TIME_S, metavar="SECONDS",
                   help=f"wall-clock budget for the whole command (default {DEFAULT_TIME_S:.0f}); past it the work is "
                   "stopped: check reports unknown (exit 2), run and build an error (exit 1)")
    p.add_argument("--memory-limit", type=size, default=DEFAULT_MEMORY, metavar="SIZE",
                   help=f"memory budget on top of what Argus itself uses (default {format_bytes(DEFAULT_MEMORY)}; "
                   "e.g. 512M, 16G); interpreter work that cannot fit is refused up front, and an allocation past "
                   "it stops the command cleanly. Not applied to GPU runs (a CUDA context maps more address space)")
