"""Metric plots as PNG without matplotlib: a canvas, lines, a 3x5 pixel font, zlib + struct.

A metric curve is the one picture a person wants after a run, and pulling in matplotlib (and
its font cache) for it would make a monitoring tool heavy. This draws a plain line chart:
title, y grid with labels, first/last x labels, the series. Sparklines for Markdown are here
too, so every rendering of a series lives in one place.
"""

from __future__ import annotations

import math
import struct
import zlib
from collections.abc import Sequence

Color = tuple[int, int, int]
WHITE: Color = (255, 255, 255)
INK: Color = (40, 40, 40)
GRID: Color = (225, 225, 225)
AXIS: Color = (150, 150, 150)
LINE: Color = (31, 119, 180)
SPARK_CHARS = "▁▂▃▄▅▆▇█"

# 3x5 glyphs, rows top to bottom; lowercase letters are drawn as capitals.
_FONT: dict[str, tuple[str, str, str, str, str]] = {
    "0": ("###", "#.#", "#.#", "#.#", "###"),
    "1": (".#.", "##.", ".#.", ".#.", "###"),
    "2": ("###", "..#", "###", "#..", "###"),
    "3": ("###", "..#", ".##", "..#", "###"),
    "4": ("#.#", "#.#", "###", "..#", "..#"),
    "5": ("###", "#..", "###", "..#", "###"),
    "6": ("###", "#..", "###", "#.#", "###"),
    "7": ("###", "..#", ".#.", ".#.", ".#."),
    "8": ("###", "#.#", "###", "#.#", "###"),
    "9": ("###", "#.#", "###", "..#", "###"),
    "A": (".#.", "#.#", "###", "#.#", "#.#"),
    "B": ("##.", "#.#", "##.", "#.#", "##."),
    "C": (".##", "#..", "#..", "#..", ".##"),
    "D": ("##.", "#.#", "#.#", "#.#", "##."),
    "E": ("###", "#..", "##.", "#..", "###"),
    "F": ("###", "#..", "##.", "#..", "#.."),
    "G": (".##", "#..", "#.#", "#.#", ".##"),
    "H": ("#.#", "#.#", "###", "#.#", "#.#"),
    "I": ("###", ".#.", ".#.", ".#.", "###"),
    "J": ("..#", "..#", "..#", "#.#", ".#."),
    "K": ("#.#", "#.#", "##.", "#.#", "#.#"),
    "L": ("#..", "#..", "#..", "#..", "###"),
    "M": ("#.#", "###", "###", "#.#", "#.#"),
    "N": ("##.", "#.#", "#.#", "#.#", "#.#"),
    "O": (".#.", "#.#", "#.#", "#.#", ".#."),
    "P": ("##.", "#.#", "##.", "#..", "#.."),
    "Q": (".#.", "#.#", "#.#", "##.", ".##"),
    "R": ("##.", "#.#", "##.", "#.#", "#.#"),
    "S": (".##", "#..", ".#.", "..#", "##."),
    "T": ("###", ".#.", ".#.", ".#.", ".#."),
    "U": ("#.#", "#.#", "#.#", "#.#", "###"),
    "V": ("#.#", "#.#", "#.#", "#.#", ".#."),
    "W": ("#.#", "#.#", "###", "###", "#.#"),
    "X": ("#.#", "#.#", ".#.", "#.#", "#.#"),
    "Y": ("#.#", "#.#", ".#.", ".#.", ".#."),
    "Z": ("###", "..#", ".#.", "#..", "###"),
    ".": ("...", "...", "...", "...", ".#."),
    ",": ("...", "...", "...", ".#.", "#.."),
    "-": ("...", "...", "###", "...", "..."),
    "+": ("...", ".#.", "###", ".#.", "..."),
    "_": ("...", "...", "...", "...", "###"),
    ":": ("...", ".#.", "...", ".#.", "..."),
    "/": ("..#", "..#", ".#.", "#..", "#.."),
    "(": (".#.", "#..", "#..", "#..", ".#."),
    ")": (".#.", "..#", "..#", "..#", ".#."),
    "=": ("...", "###", "...", "###", "..."),
    "%": ("#.#", "..#", ".#.", "#..", "#.#"),
    " ": ("...", "...", "...", "...", "..."),
    "?": ("##.", "..#", ".#.", "...", ".#."),
}


class Canvas:
    """An RGB raster with the few drawing verbs a line chart needs."""

    def __init__(self, width: int, height: int, background: Color = WHITE) -> None:
        self.width = width
        self.height = height
        self.pixels = bytearray(bytes(background) * (width * height))

    def set(self, x: int, y: int, color: Color) -> None:
        if 0 <= x < self.width and 0 <= y < self.height:
            i = 3 * (y * self.width + x)
            self.pixels[i : i + 3] = bytes(color)

    def get(self, x: int, y: int) -> Color:
        i = 3 * (y * self.width + x)
        return (self.pixels[i], self.pixels[i + 1], self.pixels[i + 2])

    def line(self, x0: int, y0: int, x1: int, y1: int, color: Color, width: int = 1) -> None:
        """Bresenham; `width` > 1 stamps a small square at each step."""
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
        err = dx + dy
        half = width // 2
        while True:
            for ox in range(-half, width - half):
                for oy in range(-half, width - half):
                    self.set(x0 + ox, y0 + oy, color)
            if x0 == x1 and y0 == y1:
                return
            e2 = 2 * err
            if e2 >= dy:
                err += dy
                x0 += sx
            if e2 <= dx:
                err += dx
                y0 += sy

    def text(self, x: int, y: int, text: str, color: Color = INK, scale: int = 2) -> int:
        """Draw `text` with its top-left at (x, y); return the width drawn, in pixels."""
        cursor = x
        for char in text:
            glyph = _FONT.get(char.upper(), _FONT["?"])
            for row, bits in enumerate(glyph):
                for col, bit in enumerate(bits):
                    if bit == "#":
                        for sx in range(scale):
                            for sy in range(scale):
                                self.set(cursor + col * scale + sx, y + row * scale + sy, color)
            cursor += 4 * scale
        return cursor - x

    def png(self) -> bytes:
        return encode_png(self.width, self.height, bytes(self.pixels))


def text_width(text: str, scale: int = 2) -> int:
    return len(text) * 4 * scale


def encode_png(width: int, height: int, rgb: bytes) -> bytes:
    """Truecolor 8-bit PNG: filter byte 0 per row, one zlib IDAT chunk."""
    stride = width * 3
    raw = b"".join(b"\x00" + rgb[y * stride : (y + 1) * stride] for y in range(height))

    def chunk(tag: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(tag + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw, 9))
        + chunk(b"IEND", b"")
    )


def _label(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1e5 or abs(value) < 1e-3:
        return f"{value:.2e}"
    return f"{value:.4g}"


def line_chart(
    title: str, points: Sequence[tuple[float, float]], width: int = 640, height: int = 320
) -> bytes:
    """A PNG line chart of (x, y) points with a title and labelled y grid."""
    canvas = Canvas(width, height)
    left, right, top, bottom = 86, 16, 30, 34
    plot_w, plot_h = width - left - right, height - top - bottom
    canvas.text(left, 8, title[:60])
    finite = [(x, y) for x, y in points if math.isfinite(x) and math.isfinite(y)]
    if not finite:
        canvas.text(left, top + plot_h // 2, "no data")
        return canvas.png()
    xs = [x for x, _ in finite]
    ys = [y for _, y in finite]
    x_lo, x_hi = min(xs), max(xs)
    y_lo, y_hi = min(ys), max(ys)
    if x_hi == x_lo:
        x_hi = x_lo + 1
    if y_hi == y_lo:
        y_lo, y_hi = y_lo - 0.5, y_hi + 0.5

    def px(x: float) -> int:
        return left + round((x - x_lo) / (x_hi - x_lo) * (plot_w - 1))

    def py(y: float) -> int:
        return top + round((y_hi - y) / (y_hi - y_lo) * (plot_h - 1))

    for i in range(5):
        value = y_lo + (y_hi - y_lo) * i / 4
        grid_y = py(value)
        canvas.line(left, grid_y, left + plot_w - 1, grid_y, GRID)
        label = _label(value)
        canvas.text(left - 6 - text_width(label), grid_y - 5, label)
    canvas.line(left, top, left, top + plot_h - 1, AXIS)
    canvas.line(left, top + plot_h - 1, left + plot_w - 1, top + plot_h - 1, AXIS)
    canvas.text(left, top + plot_h + 8, _label(x_lo))
    last = _label(x_hi)
    canvas.text(left + plot_w - text_width(last), top + plot_h + 8, last)
    prev: tuple[int, int] | None = None
    for x, y in finite:
        here = (px(x), py(y))
        if prev is None:
            canvas.set(*here, LINE)
        else:
            canvas.line(prev[0], prev[1], here[0], here[1], LINE, width=2)
        prev = here
    return canvas.png()


def sparkline(values: Sequence[float], width: int = 40) -> str:
    """Unicode blocks for Markdown: bucket means when there are more values than `width`."""
    finite = [float(v) for v in values if math.isfinite(v)]
    if not finite:
        return ""
    if len(finite) > width:
        size = len(finite) / width
        finite = [
            sum(b) / len(b)
            for b in (
                finite[int(i * size) : max(int((i + 1) * size), int(i * size) + 1)]
                for i in range(width)
            )
        ]
    lo, hi = min(finite), max(finite)
    if hi == lo:
        return SPARK_CHARS[len(SPARK_CHARS) // 2] * len(finite)
    top = len(SPARK_CHARS) - 1
    return "".join(SPARK_CHARS[round((v - lo) / (hi - lo) * top)] for v in finite)
