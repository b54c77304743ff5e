"""The sqlite result cache: keys, failures, concurrent writers."""

from __future__ import annotations

import multiprocessing as mp
import os
import subprocess
import sys

from hdeval.llm.cache import ResultCache, cache_key


def test_key_depends_on_answer_relevant_parts_only():
    base = cache_key("digits", "model-a", "v1", ["doc", "text"], "suffix")
    assert base == cache_key("digits", "model-a", "v1", ["doc", "text"], "suffix")
    assert base != cache_key("digits", "model-b", "v1", ["doc", "text"], "suffix")
    assert base != cache_key("digits", "model-a", "v2", ["doc", "text"], "suffix")
    assert base != cache_key("digits", "model-a", "v1", ["doc", "text2"], "suffix")


def test_put_get_failures_info_clear(tmp_path):
    cache = ResultCache(tmp_path / "c.sqlite")
    cache.record_failures("digits", {"k1": "digit mass 0.1 below 0.5"})
    assert cache.failures() == {"k1": "digit mass 0.1 below 0.5"}
    assert cache.get("k1") is None
    cache.put("digits", "k1", {"probs": [1, 0, 0, 0, 0], "mass": 0.9})
    assert cache.failures() == {}
    assert cache.get("k1") == {"probs": [1, 0, 0, 0, 0], "mass": 0.9}
    info = cache.info()
    assert info["results"] == {"digits": 1} and info["failures"] == 0
    cache.clear()
    assert cache.get("k1") is None


def _writer(path: str, worker: int, n: int) -> None:
    cache = ResultCache(path)
    for i in range(n):
        cache.put("digits", f"{worker}-{i}", {"i": i})


def test_concurrent_writers_lose_nothing(tmp_path):
    path = str(tmp_path / "c.sqlite")
    ResultCache(path)
    procs = [mp.get_context("spawn").Process(target=_writer, args=(path, w, 150)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    keys = [f"{w}-{i}" for w in range(4) for i in range(150)]
    assert len(ResultCache(path).get_many(keys)) == 600


def test_hdeval_cache_naming_a_directory_means_a_file_inside_it(tmp_path, monkeypatch):
    """``HDEVAL_CACHE`` set to an existing directory (or to a path ending in a slash) keeps
    the cache in ``llm.sqlite`` inside it, instead of failing to open a directory."""
    monkeypatch.setenv("HDEVAL_CACHE", str(tmp_path))
    cache = ResultCache()
    assert cache.path == tmp_path / "llm.sqlite"
    cache.put("digits", "k", {"v": 1})
    assert ResultCache().get("k") == {"v": 1}
    monkeypatch.setenv("HDEVAL_CACHE", f"{tmp_path}/new/")
    assert ResultCache().path == tmp_path / "new" / "llm.sqlite"


def test_a_cache_path_that_cannot_be_opened_is_one_line_naming_the_variable(tmp_path):
    (tmp_path / "a-file").write_text("not a directory")
    env = {**os.environ, "HDEVAL_CACHE": str(tmp_path / "a-file" / "llm.sqlite")}
    hdeval = os.path.join(os.path.dirname(sys.executable), "hdeval")
    done = subprocess.run([hdeval, "cache", "info"], env=env, capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    (line,) = [x for x in done.stderr.splitlines() if x.strip()]
    assert line.startswith("error: cannot open the LLM result cache") and "HDEVAL_CACHE" in line
    env["HDEVAL_CACHE"] = str(tmp_path)
    done = subprocess.run([hdeval, "cache", "info"], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert str(tmp_path / "llm.sqlite") in done.stdout
