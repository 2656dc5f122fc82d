"""A small raster plotter that writes PNG with numpy and zlib only (matplotlib is not a dependency)."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np

from argus.files import write_output

# 5x7 bitmap font: each glyph is 7 rows of 5 bits ("1" = ink). Lower case prints as upper case.
_FONT = {
    " ": ["00000"] * 7,
    "0": ["01110", "10001", "10011", "10101", "11001", "10001", "01110"],
    "1": ["00100", "01100", "00100", "00100", "00100", "00100", "01110"],
    "2": ["01110", "10001", "00001", "00010", "00100", "01000", "11111"],
    "3": ["11111", "00010", "00100", "00010", "00001", "10001", "01110"],
    "4": ["00010", "00110", "01010", "10010", "11111", "00010", "00010"],
    "5": ["11111", "10000", "11110", "00001", "00001", "10001", "01110"],
    "6": ["00110", "01000", "10000", "11110", "10001", "10001", "01110"],
    "7": ["11111", "00001", "00010", "00100", "01000", "01000", "01000"],
    "8": ["01110", "10001", "10001", "01110", "10001", "10001", "01110"],
    "9": ["01110", "10001", "10001", "01111", "00001", "00010", "01100"],
    "A": ["01110", "10001", "10001", "11111", "10001", "10001", "10001"],
    "B": ["11110", "10001", "10001", "11110", "10001", "10001", "11110"],
    "C": ["01110", "10001", "10000", "10000", "10000", "10001", "01110"],
    "D": ["11100", "10010", "10001", "10001", "10001", "10010", "11100"],
    "E": ["11111", "10000", "10000", "11110", "10000", "10000", "11111"],
    "F": ["11111", "10000", "10000", "11110", "10000", "10000", "10000"],
    "G": ["01110", "10001", "10000", "10111", "10001", "10001", "01111"],
    "H": ["10001", "10001", "10001", "11111", "10001", "10001", "10001"],
    "I": ["01110", "00100", "00100", "00100", "00100", "00100", "01110"],
    "J": ["00111", "00010", "00010", "00010", "00010", "10010", "01100"],
    "K": ["10001", "10010", "10100", "11000", "10100", "10010", "10001"],
    "L": ["10000", "10000", "10000", "10000", "10000", "10000", "11111"],
    "M": ["10001", "11011", "10101", "10101", "10001", "10001", "10001"],
    "N": ["10001", "10001", "11001", "10101", "10011", "10001", "10001"],
    "O": ["01110", "10001", "10001", "10001", "10001", "10001", "01110"],
    "P": ["11110", "10001", "10001", "11110", "10000", "10000", "10000"],
    "Q": ["01110", "10001", "10001", "10001", "10101", "10010", "01101"],
    "R": ["11110", "10001", "10001", "11110", "10100", "10010", "10001"],
    "S": ["01111", "10000", "10000", "01110", "00001", "00001", "11110"],
    "T": ["11111", "00100", "00100", "00100", "00100", "00100", "00100"],
    "U": ["10001", "10001", "10001", "10001", "10001", "10001", "01110"],
    "V": ["10001", "10001", "10001", "10001", "10001", "01010", "00100"],
    "W": ["10001", "10001", "10001", "10101", "10101", "10101", "01010"],
    "X": ["10001", "10001", "01010", "00100", "01010", "10001", "10001"],
    "Y": ["10001", "10001", "10001", "01010", "00100", "00100", "00100"],
    "Z": ["11111", "00001", "00010", "00100", "01000", "10000", "11111"],
    ".": ["00000", "00000", "00000", "00000", "00000", "01100", "01100"],
    ",": ["00000", "00000", "00000", "00000", "01100", "00100", "01000"],
    "-": ["00000", "00000", "00000", "11111", "00000", "00000", "00000"],
    "+": ["00000", "00100", "00100", "11111", "00100", "00100", "00000"],
    ":": ["00000", "01100", "01100", "00000", "01100", "01100", "00000"],
    "(": ["00010", "00100", "01000", "01000", "01000", "00100", "00010"],
    ")": ["01000", "00100", "00010", "00010", "00010", "00100", "01000"],
    "/": ["00000", "00001", "00010", "00100", "01000", "10000", "00000"],
    "%": ["11000", "11001", "00010", "00100", "01000", "10011", "00011"],
    "=": ["00000", "00000", "11111", "00000", "11111", "00000", "00000"],
    "_": ["00000", "00000", "00000", "00000", "00000", "00000", "11111"],
    "'": ["00100", "00100", "00000", "00000", "00000", "00000", "00000"],
}
_GLYPHS = {ch: np.array([[c == "1" for c in row] for row in rows], dtype=bool) for ch, rows in _FONT.items()}

RGB = tuple[int, int, int]


class Canvas:
    def __init__(self, width: int, height: int, bg: RGB = (255, 255, 255)):
        self.w, self.h = width, height
        self.px = np.empty((height, width, 3), np.uint8)
        self.px[:, :] = bg

    def dot(self, x: float, y: float, color: RGB, r: int = 0) -> None:
        xi, yi = int(round(x)), int(round(y))
        for dy in range(-r, r + 1):
            for dx in range(-r, r + 1):
                if dx * dx + dy * dy <= r * r + r and 0 <= xi + dx < self.w and 0 <= yi + dy < self.h:
                    self.px[yi + dy, xi + dx] = color

    def line(self, x0: float, y0: float, x1: float, y1: float, color: RGB, width: int = 1) -> None:
        n = int(max(abs(x1 - x0), abs(y1 - y0))) + 1
        r = max(0, (width - 1) // 2)
        for t in np.linspace(0.0, 1.0, n + 1):
            self.dot(x0 + (x1 - x0) * t, y0 + (y1 - y0) * t, color, r)

    def rect(self, x0: int, y0: int, x1: int, y1: int, color: RGB) -> None:
        self.line(x0, y0, x1, y0, color)
        self.line(x1, y0, x1, y1, color)
        self.line(x1, y1, x0, y1, color)
        self.line(x0, y1, x0, y0, color)

    def text(self, x: int, y: int, s: str, color: RGB = (0, 0, 0), scale: int = 1, anchor: str = "left") -> None:
        w = len(s) * 6 * scale
        if anchor == "center":
            x -= w // 2
        elif anchor == "right":
            x -= w
        for i, ch in enumerate(s.upper()):
            g = _GLYPHS.get(ch, _GLYPHS[" "])
            ys, xs = np.nonzero(g)
            for yy, xx in zip(ys, xs):
                for sy in range(scale):
                    for sx in range(scale):
                        px, py = x + i * 6 * scale + xx * scale + sx, y + yy * scale + sy
                        if 0 <= px < self.w and 0 <= py < self.h:
                            self.px[py, px] = color

    def save(self, path: str | Path) -> None:
        write_png(path, self.px)


def write_png(path: str | Path, rgb: np.ndarray) -> None:
    """8-bit RGB PNG: signature, IHDR, one zlib-compressed IDAT (filter 0 per row), IEND."""
    h, w, _ = rgb.shape

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    raw = np.concatenate([np.zeros((h, 1), np.uint8), rgb.reshape(h, w * 3)], axis=1).tobytes()
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) \
        + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")
    write_output(path, png, force=True)  # atomic, never through a planted link


def _nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    span = hi - lo
    if span <= 0:
        return [lo]
    raw = span / n
    mag = 10 ** np.floor(np.log10(raw))
    step = min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), default=raw)
    start = np.ceil(lo / step) * step
    return [float(x) for x in np.arange(start, hi + step * 0.001, step)]


def plot_rewards(path: str | Path, rewards: list[float | None], best: list[float], title: str,
                 ylabel: str = "reward (log speedup)", width: int = 720, height: int = 400) -> None:
    """Reward per step (dots; failed steps as red crosses on the axis) and best-so-far (a step line)."""
    c = Canvas(width, height)
    left, right, top, bottom = 70, width - 20, 40, height - 50
    ok = [r for r in rewards if r is not None] + list(best)
    lo, hi = min(ok + [0.0]), max(ok + [0.0])
    pad = 0.08 * (hi - lo or 1.0)
    lo, hi = lo - pad, hi + pad
    n = max(1, len(rewards) - 1)

    def X(i: float) -> float:
        return left + (right - left) * i / n

    def Y(v: float) -> float:
        return bottom - (bottom - top) * (v - lo) / (hi - lo)

    grid, axis = (225, 225, 225), (60, 60, 60)
    for t in _nice_ticks(lo, hi):
        c.line(left, Y(t), right, Y(t), grid)
        c.text(left - 6, int(Y(t)) - 3, f"{t:.2f}", axis, anchor="right")
    for t in _nice_ticks(0, n, min(10, n)):
        if abs(t - round(t)) < 1e-9:
            c.line(X(t), bottom, X(t), bottom + 4, axis)
            c.text(int(X(t)), bottom + 8, str(int(round(t))), axis, anchor="center")
    c.rect(left, top, right, bottom, axis)
    if lo < 0 < hi:
        c.line(left, Y(0), right, Y(0), (170, 170, 170))
    blue, green, red = (40, 90, 200), (20, 150, 60), (200, 40, 40)
    for i in range(1, len(best)):
        c.line(X(i - 1), Y(best[i - 1]), X(i), Y(best[i - 1]), green, 3)
        c.line(X(i), Y(best[i - 1]), X(i), Y(best[i]), green, 3)
    for i, r in enumerate(rewards):
        if r is None:
            x, y = X(i), bottom - 6
            c.line(x - 3, y - 3, x + 3, y + 3, red, 2)
            c.line(x - 3, y + 3, x + 3, y - 3, red, 2)
        else:
            c.dot(X(i), Y(r), blue, 3)
    c.text(width // 2, 12, title, (0, 0, 0), scale=2, anchor="center")
    c.text((left + right) // 2, height - 18, "step", axis, anchor="center")
    c.text(8, top - 14, ylabel, axis)
    lx = right - 230
    c.dot(lx, top + 12, blue, 3)
    c.text(lx + 8, top + 9, "reward", axis)
    c.line(lx + 60, top + 12, lx + 80, top + 12, green, 3)
    c.text(lx + 86, top + 9, "best", axis)
    c.line(lx + 124, top + 9, lx + 130, top + 15, red, 2)
    c.line(lx + 124, top + 15, lx + 130, top + 9, red, 2)
    c.text(lx + 136, top + 9, "failed", axis)
    c.save(path)
