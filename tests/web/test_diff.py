"""A patch parsed into files and lines, highlighted and escaped."""

from __future__ import annotations

from code_runner.web import diff

PATCH = """\
diff --git a/calc.py b/calc.py
index 1..2 100644
--- a/calc.py
+++ b/calc.py
@@ -1,3 +1,3 @@
 def add(a, b):
--- return a - b
+    return a + b  # <script>x</script>
 end
diff --git a/logo.png b/logo.png
new file mode 100644
GIT binary patch
literal 3
KcmZ?wbN>

"""


def test_files_lines_and_numbers() -> None:
    files, cut = diff.parse(PATCH)
    assert not cut
    assert [f.path for f in files] == ["calc.py", "logo.png"]
    calc = files[0]
    assert (calc.added, calc.removed) == (1, 1)
    kinds = [line.kind for line in calc.lines]
    assert kinds == ["hunk", "ctx", "del", "add", "ctx"]
    assert [(line.old_no, line.new_no) for line in calc.lines[1:]] == [
        (1, 1),
        (2, None),
        (None, 2),
        (3, 3),
    ]
    assert files[1].binary and not files[1].lines


def test_code_is_highlighted_and_escaped() -> None:
    files, _ = diff.parse(PATCH)
    added = str(files[0].lines[3].html)
    assert "<script>" not in added and "&lt;script&gt;" in added
    assert 'class="k"' in str(files[0].lines[1].html)  # `def` is a keyword


def test_side_by_side_pairs_removed_with_added() -> None:
    files, _ = diff.parse(PATCH)
    rows = diff.side_by_side(files[0])
    pair = rows[2]
    assert pair.left is not None and pair.left.kind == "del"
    assert pair.right is not None and pair.right.kind == "add"
