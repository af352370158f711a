"""The plan store's schema as numbered, named, forward-only migrations.

A migration is appended, never edited: a store made by any earlier code-runner reaches the
current schema by running the ones it lacks, in order, in one transaction, after a backup
copy of the file. A store made by a newer code-runner (more migrations than known here, or
one whose name is not ours) is refused rather than guessed at. The exact resulting schema
is pinned by a test.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from code_runner.errors import RecordError

Migration = Callable[[sqlite3.Connection], None]
MIGRATIONS: list[tuple[str, Migration]] = []


def migration(fn: Migration) -> Migration:
    MIGRATIONS.append((fn.__name__, fn))
    return fn


class StoreTooNew(RecordError):
    """The store was written by a newer code-runner; this one must not touch it."""


@migration
def m001_initial(db: sqlite3.Connection) -> None:
    db.execute("""
        CREATE TABLE plans (
            plan_id TEXT PRIMARY KEY,
            content_sha256 TEXT NOT NULL,
            source_dir TEXT NOT NULL,
            source_git_dir TEXT NOT NULL,
            runner_repo TEXT,
            base TEXT NOT NULL,
            revision INTEGER NOT NULL,
            head TEXT NOT NULL,
            status TEXT NOT NULL,
            status_reason TEXT NOT NULL DEFAULT '',
            state_version INTEGER NOT NULL DEFAULT 0,
            context_generation INTEGER NOT NULL DEFAULT 0,
            budget_deadline REAL,
            cancel_requested TEXT,
            current_attempt_id TEXT,
            settings TEXT NOT NULL DEFAULT '{}',
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL
        )""")
    db.execute("CREATE UNIQUE INDEX plans_content ON plans (content_sha256, source_git_dir, base)")
    db.execute("""
        CREATE TABLE revisions (
            plan_id TEXT NOT NULL REFERENCES plans (plan_id),
            revision INTEGER NOT NULL,
            data TEXT NOT NULL,
            sha256 TEXT NOT NULL,
            origin TEXT NOT NULL,
            action_id TEXT,
            created_at TEXT NOT NULL,
            PRIMARY KEY (plan_id, revision)
        )""")
    db.execute("""
        CREATE TABLE attempts (
            id TEXT PRIMARY KEY,
            plan_id TEXT NOT NULL REFERENCES plans (plan_id),
            item TEXT NOT NULL,
            item_sha256 TEXT NOT NULL,
            revision INTEGER NOT NULL,
            kind TEXT NOT NULL DEFAULT 'execute',
            parent TEXT NOT NULL,
            state TEXT NOT NULL,
            first_reason TEXT,
            stop_reason TEXT,
            context TEXT NOT NULL,
            deadline REAL,
            run_id TEXT,
            record_dir TEXT,
            result TEXT,
            diagnostic TEXT NOT NULL DEFAULT '',
            diagnostic_ref TEXT,
            owner_pid INTEGER,
            owner_started_at REAL,
            superseded INTEGER NOT NULL DEFAULT 0,
            created_at TEXT NOT NULL,
            started_at TEXT,
            settled_at TEXT
        )""")
    db.execute("CREATE INDEX attempts_plan ON attempts (plan_id, state)")
    db.execute("""
        CREATE TABLE ledger (
            plan_id TEXT NOT NULL REFERENCES plans (plan_id),
            sha TEXT NOT NULL,
            item TEXT NOT NULL,
            revision INTEGER NOT NULL,
            attempt_id TEXT NOT NULL UNIQUE REFERENCES attempts (id),
            parent TEXT NOT NULL,
            tree TEXT NOT NULL,
            ref TEXT NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY (plan_id, sha)
        )""")
    db.execute("""
        CREATE TABLE checkpoints (
            id INTEGER PRIMARY KEY,
            plan_id TEXT NOT NULL REFERENCES plans (plan_id),
            attempt_id TEXT NOT NULL REFERENCES attempts (id),
            kind TEXT NOT NULL,
            item TEXT NOT NULL,
            revision INTEGER NOT NULL,
            head TEXT NOT NULL,
            completed_items TEXT NOT NULL,
            paths TEXT NOT NULL,
            created_at TEXT NOT NULL,
            resolved_revision INTEGER,
            resolved_action TEXT,
            resolved_at TEXT,
            UNIQUE (attempt_id, kind)
        )""")
    db.execute("""
        CREATE TABLE findings (
            id INTEGER PRIMARY KEY,
            plan_id TEXT NOT NULL REFERENCES plans (plan_id),
            attempt_id TEXT NOT NULL UNIQUE REFERENCES attempts (id),
            item TEXT NOT NULL,
            kind TEXT NOT NULL,
            detail TEXT NOT NULL,
            created_at TEXT NOT NULL,
            escalated_at TEXT,
            resolved_action TEXT,
            resolved_at TEXT
        )""")
    db.execute("""
        CREATE TABLE user_actions (
            plan_id TEXT NOT NULL,
            action_id TEXT NOT NULL,
            kind TEXT NOT NULL,
            request_hash TEXT NOT NULL,
            response TEXT NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY (plan_id, action_id)
        )""")
    db.execute("""
        CREATE TABLE exports (
            id INTEGER PRIMARY KEY,
            plan_id TEXT NOT NULL REFERENCES plans (plan_id),
            kind TEXT NOT NULL,
            target TEXT NOT NULL,
            head TEXT NOT NULL,
            through_item TEXT,
            state TEXT NOT NULL,
            detail TEXT NOT NULL DEFAULT '',
            action_id TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL
        )""")


def _applied(db: sqlite3.Connection) -> list[str]:
    db.execute("CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at TEXT)")
    return [row[0] for row in db.execute("SELECT name FROM _migrations ORDER BY rowid")]


def _refuse_newer(path: Path, version: int, applied: list[str]) -> None:
    known = [name for name, _ in MIGRATIONS]
    unknown = [name for name in applied if name not in known]
    if version > len(MIGRATIONS) or unknown:
        raise StoreTooNew(
            f"the plan store {path} has schema {version}"
            + (f" (with {', '.join(unknown)})" if unknown else "")
            + f", newer than this code-runner knows ({len(MIGRATIONS)}).",
            fix="upgrade code-runner to the version that wrote it; the store was not changed.",
        )


def migrate(db: sqlite3.Connection, path: Path, now: str) -> int:
    """Bring the open store to the current schema; return how many migrations ran.

    Runs in one BEGIN IMMEDIATE transaction, so two first openers cannot both migrate.
    """
    version = int(db.execute("PRAGMA user_version").fetchone()[0])
    _refuse_newer(path, version, [])
    if version == len(MIGRATIONS):
        return 0
    if version > 0:  # an existing store: keep a copy of it as it was (outside the write lock)
        _backup(db, path, version)
    db.execute("BEGIN IMMEDIATE")
    try:
        applied = _applied(db)
        version = int(db.execute("PRAGMA user_version").fetchone()[0])
        _refuse_newer(path, version, applied)
        pending = [(name, fn) for name, fn in MIGRATIONS if name not in applied]
        for name, fn in pending:
            fn(db)
            db.execute("INSERT INTO _migrations (name, applied_at) VALUES (?, ?)", (name, now))
        db.execute(f"PRAGMA user_version = {len(MIGRATIONS)}")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return len(pending)


def _backup(db: sqlite3.Connection, path: Path, version: int) -> None:
    target = sqlite3.connect(path.with_name(f"{path.name}.v{version}.bak"))
    try:
        db.backup(target)
    finally:
        target.close()
