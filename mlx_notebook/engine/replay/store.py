"""Where replayable results live: one SQLite file per project folder, safe to share.

`ResultStore` keeps finished results under the key of everything that determined them
(`replay.key`). It never fails a generation: a corrupt or foreign file, a folder it
cannot write, or a full disk give one warning and the run goes on as if there were no
cache. Two kernels may write at once (WAL mode, a busy timeout): nothing is lost. The
file is created readable by its owner only.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
import time
import warnings
from pathlib import Path

log = logging.getLogger("mlx_notebook")

SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    created REAL NOT NULL,
    seconds REAL NOT NULL,
    payload TEXT NOT NULL,
    hits INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
FORMAT = "mlx_notebook results 1"  # a file whose meta says otherwise is foreign


class ResultStore:
    """A key-value store of finished results in one SQLite file.

    Args:
        path: The file (created with its folder if missing).
        timeout: Seconds to wait for another writer's lock.
    """

    def __init__(self, path: str | os.PathLike, timeout: float = 10.0) -> None:
        self.path = Path(path)
        self.timeout = timeout
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self.disabled: str | None = None  # why the store is off (one warning said it)
        self.hits = self.misses = 0

    # -- the public side -------------------------------------------------------
    def get(self, key: str) -> dict | None:
        """The stored payload for ``key``, or None (no entry, or the store is off)."""
        with self._lock:
            conn = self._connect()
            if conn is None:
                return None
            try:
                row = conn.execute("SELECT payload FROM results WHERE key = ?", (key,)).fetchone()
                if row is None:
                    self.misses += 1
                    return None
                payload = json.loads(row[0])
                try:  # a count for `%mlx cache`: best effort (a read-only file still replays)
                    conn.execute("UPDATE results SET hits = hits + 1 WHERE key = ?", (key,))
                except sqlite3.OperationalError:
                    pass
            except (sqlite3.Error, ValueError) as exc:
                if isinstance(exc, sqlite3.OperationalError) and _passing(exc):
                    self._warn_once(f"a lookup was skipped ({exc})")
                    return None
                self._off(f"could not read it ({exc})")
                return None
            self.hits += 1
            return payload

    def put(self, key: str, model: str, seconds: float, payload: dict) -> bool:
        """Store ``payload`` under ``key``; False where it could not (said once)."""
        text = json.dumps(payload, separators=(",", ":"))
        with self._lock:
            conn = self._connect()
            if conn is None:
                return False
            try:
                conn.execute(
                    "INSERT OR REPLACE INTO results (key, model, created, seconds, payload) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (key, model, time.time(), float(seconds), text),
                )
            except sqlite3.OperationalError as exc:
                if _passing(exc):  # a full disk, another kernel's long write: this one only
                    self._warn_once(f"this result was not cached ({exc})")
                    return False
                self._off(f"could not write it ({exc})")
                return False
            except sqlite3.Error as exc:
                self._off(f"could not write it ({exc})")
                return False
            return True

    def stats(self) -> dict:
        """Entries, bytes, models and this process's hits and misses."""
        with self._lock:
            conn = self._connect()
            out = {"path": str(self.path), "entries": 0, "bytes": 0, "models": {}}
            out.update(hits=self.hits, misses=self.misses, disabled=self.disabled)
            if conn is None:
                return out
            try:
                rows = conn.execute(
                    "SELECT model, COUNT(*), SUM(LENGTH(payload)) FROM results GROUP BY model"
                ).fetchall()
            except sqlite3.Error:
                return out
            out["models"] = {m: n for m, n, _ in rows}
            out["entries"] = sum(n for _, n, _ in rows)
            out["bytes"] = self.path.stat().st_size if self.path.exists() else 0
            return out

    def clear(self, model: str | None = None) -> int:
        """Forget every entry (or one model's); return how many went."""
        with self._lock:
            conn = self._connect()
            if conn is None:
                return 0
            if model is None:
                return conn.execute("DELETE FROM results").rowcount
            return conn.execute("DELETE FROM results WHERE model = ?", (model,)).rowcount

    def close(self) -> None:
        """Close the file (a later call opens it again)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    # -- opening -----------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection | None:
        if self.disabled is not None:
            return None
        if self._conn is not None:
            return self._conn
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                conn = self._open()
                break
            except sqlite3.OperationalError as exc:
                # Two kernels opening a new file at once: switching it to WAL takes a
                # lock SQLite's busy handler does not wait for. Try again a while.
                if _passing(exc) and time.monotonic() < deadline:
                    time.sleep(0.02)
                    continue
                self._off(f"could not open it ({exc})")
                return None
            except (sqlite3.Error, OSError) as exc:
                self._off(f"could not open it ({exc})")
                return None
        if conn is None:
            return None
        self._conn = conn
        return conn

    def _open(self) -> sqlite3.Connection | None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not self.path.exists():  # owner-only from the start, before SQLite writes
            os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600))
        conn = sqlite3.connect(
            self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False
        )
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA busy_timeout={int(self.timeout * 1000)}")
            conn.executescript(SCHEMA)
            found = conn.execute("SELECT value FROM meta WHERE name = 'format'").fetchone()
            if found is None:
                conn.execute("INSERT OR IGNORE INTO meta VALUES ('format', ?)", (FORMAT,))
            elif found[0] != FORMAT:
                conn.close()
                self._off(f"it is not a cache of this version ({found[0]!r})")
                return None
        except BaseException:
            conn.close()
            raise
        return conn

    def _off(self, why: str) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except sqlite3.Error:
                pass
            self._conn = None
        self.disabled = why
        self._warn_once(f"{why}; generating without it")

    def warn_once(self, why: str) -> None:
        """Say ``why`` once (the same reason is not said twice)."""
        self._warn_once(why)

    def _warn_once(self, why: str) -> None:
        msg = f"mlx_notebook: the result cache {self.path}: {why}"
        if getattr(self, "_warned", None) != why:
            self._warned = why
            warnings.warn(msg, RuntimeWarning, stacklevel=4)
            log.warning(msg)


def _passing(exc: sqlite3.OperationalError) -> bool:
    """Whether an error concerns this call only (a full disk, a lock held too long)."""
    text = str(exc).lower()
    return "full" in text or "locked" in text or "busy" in text
