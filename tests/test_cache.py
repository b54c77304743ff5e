"""The sqlite result cache: keys, failures, concurrent writers."""

from __future__ import annotations

import multiprocessing as mp

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
