"""The truncation rule: source first (its end), then the text, deterministic, counted."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from hdeval.llm.truncation import ContextOverflow, Fitted, fit_to_context
from hdeval.llm.types import ContextLimited
from hdeval.params import LLMConfig

FRAME = 10  # tokens of a prompt besides the source and the text


class WordJudge:
    """Tokenizes on spaces: one token per word, so every count in these tests is exact."""

    def __init__(self, max_context: int | None) -> None:
        self.max_context = max_context
        self.vocabulary: list[str] = []

    def tokenize(self, text: str) -> list[int]:
        ids = []
        for word in text.split():
            if word not in self.vocabulary:
                self.vocabulary.append(word)
            ids.append(self.vocabulary.index(word))
        return ids

    def detokenize(self, ids: Sequence[int]) -> str:
        return " ".join(self.vocabulary[i] for i in ids)

    def prompt_tokens(self, segments: Sequence[str], suffix: str, continuation: str = "") -> int:
        return sum(len(self.tokenize(part)) for part in [*segments, suffix, continuation])


def _words(prefix: str, n: int) -> str:
    return " ".join(f"{prefix}{i}" for i in range(n))


def _fit(judge: WordJudge, source: str, output: str) -> Fitted:
    def prompt_tokens(source: str, output: str) -> int:
        return FRAME + judge.prompt_tokens([source, output], "")

    return fit_to_context(source, output, prompt_tokens, judge)


def test_judge_stand_in_has_the_interface_the_scorer_checks() -> None:
    assert isinstance(WordJudge(10), ContextLimited)


def test_a_prompt_that_fits_is_unchanged() -> None:
    source, output = _words("s", 50), _words("t", 20)
    fitted = _fit(WordJudge(FRAME + 70), source, output)
    assert fitted == Fitted(source, output) and not fitted.truncated
    assert _fit(WordJudge(None), source, output) == Fitted(source, output)  # no known limit


def test_the_source_loses_its_end_first() -> None:
    source, output = _words("s", 50), _words("t", 20)
    fitted = _fit(WordJudge(FRAME + 60), source, output)
    assert fitted.source == _words("s", 40)  # its first 40 words
    assert fitted.output == output
    assert (fitted.source_cut, fitted.output_cut) == (10, 0) and fitted.truncated


def test_the_text_is_cut_only_once_the_source_is_gone() -> None:
    source, output = _words("s", 50), _words("t", 20)
    fitted = _fit(WordJudge(FRAME + 15), source, output)
    assert fitted.source == ""
    assert fitted.output == _words("t", 15)
    assert (fitted.source_cut, fitted.output_cut) == (50, 5)


def test_the_rule_is_deterministic() -> None:
    source, output = _words("s", 300), _words("t", 40)
    assert _fit(WordJudge(FRAME + 100), source, output) == _fit(
        WordJudge(FRAME + 100), source, output
    )


def test_a_frame_longer_than_the_context_is_refused_naming_the_limit() -> None:
    with pytest.raises(ContextOverflow, match="context of 10 tokens"):
        _fit(WordJudge(FRAME), _words("s", 5), _words("t", 5))  # even one word of text is over


def test_max_context_of_a_local_judge_or_a_server() -> None:
    assert LLMConfig(max_context=512).max_context == 512
    server = LLMConfig(backend="openai", base_url="http://h/v1", model="m", max_context=512)
    assert server.max_context == 512  # a server that does not report its context
    with pytest.raises(ValueError, match="max_context"):
        LLMConfig(max_context=0)
