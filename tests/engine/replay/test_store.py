import os
import stat
import subprocess
import sys
import warnings

from mlx_notebook.engine.replay.store import ResultStore


def test_put_get_stats_and_clear(tmp_path):
    s = ResultStore(tmp_path / "c" / "cache.sqlite")
    assert s.get("k") is None
    assert s.put("k", "m1", 1.5, {"text": "hi", "n": [1, 2]})
    s.put("k2", "m2", 0.5, {"text": "x"})
    assert s.get("k") == {"text": "hi", "n": [1, 2]}
    st = s.stats()
    assert st["entries"] == 2 and st["models"] == {"m1": 1, "m2": 1}
    assert st["hits"] == 1 and st["misses"] == 1 and st["bytes"] > 0
    assert s.clear("m1") == 1 and s.get("k") is None and s.clear() == 1


def test_the_file_is_the_owners_only(tmp_path):
    s = ResultStore(tmp_path / "cache.sqlite")
    s.put("k", "m", 0.1, {})
    assert stat.S_IMODE(os.stat(tmp_path / "cache.sqlite").st_mode) == 0o600


def test_a_corrupt_file_warns_once_and_caches_nothing(tmp_path):
    path = tmp_path / "cache.sqlite"
    path.write_bytes(b"this is not a database" * 100)
    s = ResultStore(path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert s.get("k") is None
        assert not s.put("k", "m", 0.1, {"text": "x"})
        assert s.get("k") is None
    assert len(caught) == 1 and "generating without it" in str(caught[0].message)


def test_a_folder_it_cannot_make_warns_once(tmp_path):
    # A file where the folder should be.
    (tmp_path / "taken").write_text("a file, not a folder")
    s = ResultStore(tmp_path / "taken" / "cache.sqlite")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert not s.put("k", "m", 0.1, {})
        assert s.get("k") is None
    assert len(caught) == 1 and s.disabled


def test_a_read_only_file_warns_once(tmp_path, read_only):
    path = tmp_path / "cache.sqlite"
    ResultStore(path).put("k", "m", 0.1, {"text": "x"})
    read_only(path)
    read_only(tmp_path)  # nor can its journal be made beside it
    s = ResultStore(path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert not s.put("k2", "m", 0.1, {})
        assert not s.put("k3", "m", 0.1, {})
    assert len(caught) == 1, [str(w.message) for w in caught]


WRITER = """
import sys
from mlx_notebook.engine.replay.store import ResultStore
s = ResultStore(sys.argv[1])
for i in range(100):
    assert s.put(f"{sys.argv[2]}-{i}", "m", 0.0, {"i": i})
"""


def test_two_processes_writing_at_once_lose_nothing(tmp_path):
    path = str(tmp_path / "cache.sqlite")
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, path, name]) for name in ("a", "b")]
    assert [p.wait(60) for p in procs] == [0, 0]
    s = ResultStore(path)
    assert s.stats()["entries"] == 200
    assert all(s.get(f"{n}-{i}") == {"i": i} for n in "ab" for i in range(100))


def test_a_lock_held_too_long_skips_one_call_and_keeps_the_cache(tmp_path):
    import sqlite3

    path = tmp_path / "cache.sqlite"
    s = ResultStore(path, timeout=0.1)
    s.put("k", "m", 0.1, {"text": "x"})
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")  # another kernel in the middle of a long write
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert not s.put("k2", "m", 0.1, {})
    other.execute("COMMIT")
    other.close()
    assert len(caught) == 1 and s.disabled is None
    assert s.put("k3", "m", 0.1, {"text": "y"}) and s.get("k3") == {"text": "y"}
