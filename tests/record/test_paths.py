"""The review page streamed from a file: escapes neutralized across chunk boundaries."""

from __future__ import annotations

from pathlib import Path

from code_runner import files
from code_runner.record.paths import _printable_chunks, hunk_chunks, hunk_markdown

TEXT = "+é ok\r\n+\x1b[2J\u202eevil\r\n+bare\rCR\n+\xff\n" * 3


def test_the_streamed_review_is_the_whole_one(tmp_path: Path) -> None:
    review = tmp_path / "review"
    review.write_bytes(TEXT.encode())
    whole = hunk_markdown("t", "title \x1b]0;x\x07", TEXT)
    assert b"".join(hunk_chunks("t", "title \x1b]0;x\x07", review)).decode() == whole
    assert "\x1b" not in whole and "\u202e" not in whole and "\\x1b[2J" in whole


def test_a_crlf_or_a_character_split_between_chunks_reads_the_same() -> None:
    data = TEXT.encode()
    for cut in range(1, len(data)):
        pieces = iter([data[:cut], data[cut:]])
        assert b"".join(_printable_chunks(pieces)).decode() == files.printable(TEXT), cut
