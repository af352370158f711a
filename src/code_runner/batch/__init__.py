"""Batches: many task specs or `exec` sweep cells run on local slots or on a Ray cluster.

`items` reads ITEMS (a directory or JSONL of task specs, or a sweep file); `work.run_item`
is the one item function every engine runs; `engine` is the contract (`submit`,
`as_completed`, `cancel`, `close`) that `local` (N slots here) and `ray_engine` (Ray core,
imported only when chosen) keep; `driver` owns `results.jsonl`, timeouts and Ctrl-C;
`progress` is the live view; `session.run_batch` is one whole batch.
"""

from code_runner.batch.engine import ENGINES, Completion, Engine, EngineOptions, Handle
from code_runner.batch.items import Batch, Item, ItemKind, load_items
from code_runner.batch.progress import Progress
from code_runner.batch.results import ItemResult, ItemStatus, ResultsLog
from code_runner.batch.session import BatchOutcome, BatchRequest, make_engine, run_batch
from code_runner.batch.work import Cancel, run_item

__all__ = [
    "ENGINES",
    "Batch",
    "BatchOutcome",
    "BatchRequest",
    "Cancel",
    "Completion",
    "Engine",
    "EngineOptions",
    "Handle",
    "Item",
    "ItemKind",
    "ItemResult",
    "ItemStatus",
    "Progress",
    "ResultsLog",
    "load_items",
    "make_engine",
    "run_batch",
    "run_item",
]
