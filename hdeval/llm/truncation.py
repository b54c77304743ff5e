"""Fitting a prompt into the judge's context window by one deterministic truncation rule.

A prompt longer than the judge's context is cut, never sent whole: first the source document (its
beginning is kept, its end cut), then, only if the prompt is still too long with none of the
source left, the text under evaluation the same way (at least one of its tokens is kept). The rule
depends only on the texts, the tokenizer and the context length, so the cut prompt, and the cache
key computed from it, is the same on every run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hdeval.errors import HDEvalError
from hdeval.llm.types import ContextLimited


class ContextOverflow(HDEvalError):
    """The prompt exceeds the context even with the source and the text cut to the minimum."""


@dataclass(frozen=True)
class Fitted:
    """The source and text to put in the prompt, and how many tokens were cut from each."""

    source: str
    output: str
    source_cut: int = 0
    output_cut: int = 0

    @property
    def truncated(self) -> bool:
        return bool(self.source_cut or self.output_cut)


def _cut_end(
    text: str,
    excess: int,
    excess_of: Callable[[str], int],
    keep_at_least: int,
    judge: ContextLimited,
) -> tuple[str, int, int]:
    """Drop tokens from the end of ``text`` until the prompt fits or ``keep_at_least`` are left.

    Returns the cut text, the number of its tokens dropped and the remaining excess.
    """
    ids = judge.tokenize(text)
    keep = len(ids)
    while excess > 0 and keep > keep_at_least:
        keep = max(keep_at_least, keep - excess)
        text = judge.detokenize(ids[:keep])
        excess = excess_of(text)
    return text, len(ids) - keep, excess


def fit_to_context(
    source: str,
    output: str,
    prompt_tokens: Callable[[str, str], int],
    judge: ContextLimited,
) -> Fitted:
    """Cut ``source``, then ``output``, until ``prompt_tokens(source, output)`` fits the context.

    ``prompt_tokens`` is the length in tokens of the longest prompt built from the two texts.
    Raises :class:`ContextOverflow` when the prompt is too long even then.
    """
    limit = judge.max_context
    excess = prompt_tokens(source, output) - limit if limit else 0
    if excess <= 0:
        return Fitted(source, output)
    source, source_cut, excess = _cut_end(
        source, excess, lambda s: prompt_tokens(s, output) - limit, 0, judge
    )
    output_cut = 0
    if excess > 0:
        output, output_cut, excess = _cut_end(
            output, excess, lambda o: prompt_tokens(source, o) - limit, 1, judge
        )
    if excess > 0:
        raise ContextOverflow(
            f"the prompt is {excess} tokens longer than the judge's context of {limit} tokens "
            "even without the source document and with one token of the text"
        )
    return Fitted(source, output, source_cut, output_cut)
