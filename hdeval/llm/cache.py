"""Persistent LLM result cache: sqlite in WAL mode, safe across processes and kill -9.

A key is the sha256 of everything that changes the answer: the model identity, the prompt
template version, the kind of request and the rendered prompt parts. Nothing else (timeouts,
concurrency, batch size) enters it. Each write is its own short transaction, so a process killed
mid-run loses at most the result it was computing. Failures are kept in a separate table: they are
reported, never served as results, and retried by the next run.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from hdeval.errors import ConfigError, HDEvalError
from hdeval.invalid_unicode import unicode_problems
from hdeval.paths import hdeval_home

#: The cache's file name inside a directory (``HDEVAL_CACHE`` naming a directory).
CACHE_FILE = "llm.sqlite"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    key TEXT PRIMARY KEY, kind TEXT NOT NULL, value TEXT NOT NULL, created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS failures (
    key TEXT PRIMARY KEY, kind TEXT NOT NULL, reason TEXT NOT NULL, created REAL NOT NULL
);
"""


def cache_key(*parts: object) -> str:
    """sha256 over the JSON encoding of ``parts`` (order matters, formatting does not).

    Every text reaching a key was checked for invalid Unicode where it was read; one that was
    not is refused here, naming its place among ``parts``."""
    payload = json.dumps(parts, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    try:
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()
    except UnicodeEncodeError:
        raise HDEvalError(f"a request to the judge: {unicode_problems(list(parts))}") from None


def default_cache_path() -> Path:
    """The file ``HDEVAL_CACHE`` names if set (see :func:`cache_file`), else
    ``<hdeval home>/cache/llm.sqlite``."""
    env = os.environ.get("HDEVAL_CACHE")
    return cache_file(env) if env else hdeval_home() / "cache" / CACHE_FILE


def cache_file(path: str | Path) -> Path:
    """The sqlite file of a cache location: ``path`` itself, or ``llm.sqlite`` inside it where
    it is an existing directory or is written with a trailing slash."""
    text = str(path)
    if Path(text).is_dir() or text.endswith(("/", os.sep)):
        return Path(text) / CACHE_FILE
    return Path(text)


class ResultCache:
    """Key-value store of LLM results with hit/miss counters."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = cache_file(path) if path else default_cache_path()
        self._local = threading.local()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self._connect() as conn:
                conn.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            fix = "give" if path else "set HDEVAL_CACHE to"
            raise ConfigError(
                f"cannot open the LLM result cache {self.path}: {exc}; {fix} a file that can be "
                f"created, or a directory (the cache is then {CACHE_FILE} inside it)"
            ) from None
        self.hits = 0
        self.misses = 0

    def _connect(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=60, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = conn
        return conn

    def get_many(
        self,
        keys: Iterable[str],
        usable: Callable[[dict], bool] | None = None,
        count: bool = True,
    ) -> dict[str, dict]:
        """Cached values for those ``keys`` that have one (that ``usable`` accepts, if given: an
        entry of an older layout is a miss); counts hits and misses unless ``count`` is False."""
        keys = list(dict.fromkeys(keys))
        found: dict[str, dict] = {}
        conn = self._connect()
        for start in range(0, len(keys), 500):
            batch = keys[start : start + 500]
            marks = ",".join("?" * len(batch))
            rows = conn.execute(f"SELECT key, value FROM results WHERE key IN ({marks})", batch)
            found.update((k, json.loads(v)) for k, v in rows)
        if usable is not None:
            found = {k: v for k, v in found.items() if usable(v)}
        if count:
            self.hits += len(found)
            self.misses += len(keys) - len(found)
        return found

    def recount(self, answered: int) -> None:
        """Count ``answered`` misses of the last look-up as hits: they were read off other
        entries (see :meth:`~hdeval.llm.judge.CachedJudge.loglikelihoods`)."""
        self.hits += answered
        self.misses -= answered

    def get(self, key: str) -> dict | None:
        return self.get_many([key]).get(key)

    def put_many(self, kind: str, values: Mapping[str, dict]) -> None:
        """Store results in one transaction and clear any failure recorded for their keys."""
        if not values:
            return
        now = time.time()
        conn = self._connect()
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany(
                "INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?)",
                [(k, kind, json.dumps(v), now) for k, v in values.items()],
            )
            conn.executemany("DELETE FROM failures WHERE key = ?", [(k,) for k in values])
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def put(self, kind: str, key: str, value: dict) -> None:
        self.put_many(kind, {key: value})

    def record_failures(self, kind: str, reasons: Mapping[str, str]) -> None:
        if not reasons:
            return
        now = time.time()
        conn = self._connect()
        conn.executemany(
            "INSERT OR REPLACE INTO failures VALUES (?, ?, ?, ?)",
            [(k, kind, r, now) for k, r in reasons.items()],
        )

    def failures(self) -> dict[str, str]:
        return dict(self._connect().execute("SELECT key, reason FROM failures"))

    def info(self) -> dict:
        conn = self._connect()
        by_kind = dict(conn.execute("SELECT kind, COUNT(*) FROM results GROUP BY kind"))
        n_failures = conn.execute("SELECT COUNT(*) FROM failures").fetchone()[0]
        size = sum(p.stat().st_size for p in self.path.parent.glob(self.path.name + "*"))
        return {"path": str(self.path), "results": by_kind, "failures": n_failures, "bytes": size}

    def clear(self) -> None:
        conn = self._connect()
        conn.execute("DELETE FROM results")
        conn.execute("DELETE FROM failures")
        conn.execute("VACUUM")

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
