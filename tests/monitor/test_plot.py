"""The pure-Python PNG writer: a valid file whose pixels show the curve."""

from __future__ import annotations

import struct
import zlib

from code_runner.monitor.plot import LINE, encode_png, line_chart, sparkline


def decode_png(data: bytes) -> tuple[int, int, list[bytes]]:
    """Decode our own PNGs (8-bit RGB, filter 0) back to rows; checks CRCs on the way."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height = 8, b"", 0, 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        tag = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        assert crc == zlib.crc32(tag + body) & 0xFFFFFFFF
        if tag == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
            assert (depth, color) == (8, 2)
        elif tag == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * 3 + 1
    rows = [raw[y * stride + 1 : (y + 1) * stride] for y in range(height)]
    assert all(raw[y * stride] == 0 for y in range(height))
    return width, height, rows


def _line_pixels(rows: list[bytes]) -> list[tuple[int, int]]:
    found = []
    for y, row in enumerate(rows):
        for x in range(len(row) // 3):
            if tuple(row[3 * x : 3 * x + 3]) == LINE:
                found.append((x, y))
    return found


def test_encode_roundtrip() -> None:
    pixels = bytes([255, 0, 0, 0, 255, 0, 0, 0, 255, 9, 9, 9])
    width, height, rows = decode_png(encode_png(2, 2, pixels))
    assert (width, height) == (2, 2)
    assert rows == [pixels[:6], pixels[6:]]


def test_falling_curve_goes_down_to_the_right() -> None:
    png = line_chart("loss", [(float(i), 10.0 - i) for i in range(10)], width=320, height=200)
    width, height, rows = decode_png(png)
    assert (width, height) == (320, 200)
    pts = _line_pixels(rows)
    assert len(pts) > 100
    left = [y for x, y in pts if x < min(x for x, _ in pts) + 5]
    right = [y for x, y in pts if x > max(x for x, _ in pts) - 5]
    assert min(left) < min(right)  # image y grows downward: the start is higher


def test_rising_curve_is_the_mirror() -> None:
    _, _, rows = decode_png(line_chart("acc", [(0, 0.1), (1, 0.5), (2, 0.9)], 200, 120))
    pts = _line_pixels(rows)
    first_x, last_x = min(x for x, _ in pts), max(x for x, _ in pts)
    y_first = min(y for x, y in pts if x == first_x)
    y_last = min(y for x, y in pts if x == last_x)
    assert y_first > y_last


def test_degenerate_series_still_make_a_picture() -> None:
    for points in ([], [(0.0, 1.0)], [(1.0, 2.0), (1.0, 2.0)], [(0.0, float("nan"))]):
        width, height, _ = decode_png(line_chart("m", points, 100, 80))
        assert (width, height) == (100, 80)


def test_sparkline() -> None:
    assert sparkline([1, 2, 3, 4, 5, 6, 7, 8]) == "▁▂▃▄▅▆▇█"
    assert sparkline([3, 3, 3]) == "▅▅▅"
    assert len(sparkline(list(range(1000)), width=40)) == 40
    assert sparkline([]) == ""
