"""What the MCP server answers about a large patch: a bounded head, the whole file's size,
sha256 and path, read in pieces (the plan item's record is a normal task record)."""

from __future__ import annotations

import hashlib
import json

import pytest

from tests.helpers.big_patch import BigPlan, peak_mib

pytestmark = pytest.mark.integration

_IMPORT = "from code_runner.mcp_server import reading\n"


def test_a_large_patch_is_answered_with_its_head_size_and_digest(big_plan: BigPlan) -> None:
    record = big_plan.item_record
    view = (
        f"v = reading.task_result(__import__('pathlib').Path({str(record)!r}), 'P1')\n"
        "print(json.dumps(v))\n"
    )
    baseline, _ = peak_mib(_IMPORT, env=big_plan.env)  # the MCP SDK is most of it
    peak, done = peak_mib(_IMPORT + "import json\n" + view, env=big_plan.env)
    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(done.stdout)
    patch = record / "P1.patch"
    data = patch.read_bytes()
    assert answer["patch_truncated"] is True and answer["patch_path"] == str(patch)
    assert answer["patch_bytes"] == len(data) > 48 * 2**20
    assert answer["patch_sha256"] == hashlib.sha256(data).hexdigest()
    head = answer["patch"].encode()
    assert 0 < len(head) <= 256 * 1024 and data.startswith(head)
    # measured: 2 MiB above the import, 101 MiB when the patch was read and decoded whole
    assert peak - baseline < 16, f"the view peaked {peak - baseline:.1f} MiB above the import"
