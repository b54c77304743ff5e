"""Invalid Unicode (a lone surrogate) in a criteria file, a params file or an LLM reply is
refused as in a data file, naming the place, before it reaches a cache key."""

from __future__ import annotations

from pathlib import Path

import pytest

from hdeval.errors import ConfigError, HDEvalError
from hdeval.llm.cache import ResultCache, cache_key
from hdeval.llm.judge import CachedJudge
from hdeval.llm.types import TokenCounts
from hdeval.params import load_params
from hdeval.tree.criteria import CriteriaTree

CUT = "\\ud83d"  # YAML's escape of half an emoji


def test_a_criteria_file_with_a_lone_surrogate_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "criteria.yaml"
    path.write_text(
        "criteria:\n"
        '  - {id: c, name: coherence, definition: "well organized"}\n'
        f'  - {{id: f, name: fluency, definition: "grammatical {CUT}"}}\n'
    )
    with pytest.raises(ConfigError) as caught:
        CriteriaTree.from_yaml(path)
    message = str(caught.value)
    assert str(path) in message and "field 'criteria[1].definition'" in message
    assert "lone surrogate U+D83D at character 12" in message


def test_a_params_file_with_a_lone_surrogate_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "params.yaml"
    path.write_text(f'task:\n  description: "news {CUT}"\n')
    with pytest.raises(ConfigError, match=r"field 'task.description': invalid Unicode"):
        load_params(path)


class Replier:
    identity = "replier"

    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.tokens = TokenCounts()

    def generate(self, prompt: str, max_new_tokens: int = 512) -> str:
        return self.reply


def test_a_reply_with_a_lone_surrogate_is_refused_and_not_cached(tmp_path: Path) -> None:
    judge = CachedJudge(Replier("1. Clarity: \ud83d"), ResultCache(tmp_path / "c.sqlite"))
    with pytest.raises(HDEvalError, match=r"reply of the judge replier is not text.*U\+D83D"):
        judge.reply("decompose", "List criteria.", 64)
    assert judge.cache.info()["results"] == {}
    judge.backend.reply = "1. Clarity: clear."
    assert judge.reply("decompose", "List criteria.", 64) == "1. Clarity: clear."


def test_a_cache_key_of_invalid_unicode_names_it() -> None:
    with pytest.raises(HDEvalError, match=r"field '\[2\]': invalid Unicode: lone surrogate"):
        cache_key("digits", "judge", "half \udc00")
