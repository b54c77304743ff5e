"""Signal families beyond the criteria: what the text, its source and its references tell a
judge, each one switch of ``hierarchy.families`` and a few feature columns.

=============  ==========================================================  ===================
family         columns (target ``_text`` unless named)                     LLM cost per text
=============  ==========================================================  ===================
coverage       ``cov``: the source's lead (first 60 words) given the       one likelihood pass
               text, mean token log-probability (BARTScore's recall        over the lead, plus
               direction); ``cov.gain``: that minus the lead's own         one per document
               likelihood (how much the text explains of the source)
sentences      ``spmi.min`` / ``spmi.max``: the lowest and highest         none (the text's
               sentence PMI with the source; ``spmi.neg``: the share of    two likelihoods)
               sentences with PMI <= 0; ``len.sents``: sentence count
repetition     ``rep.trigrams``: the share of the text's word trigrams     none (read from the
               that repeat an earlier one (a degenerate summary that       text alone)
               loops; a likelihood rewards it, as repeated text is
               predictable)
slots          ``slots.realised``: share of the meaning representation's   none
               spoken values the text realises; ``slots.omitted``: how
               many it leaves out (:mod:`hdeval.scoring.sources`)
wording        ``word.given`` / ``word.free`` (each also ``.min``,         none (the text's
               ``.p10``): the text's tokens outside the meaning            two likelihoods)
               representation's values, given the source and without it
               (how a sentence says it, apart from what it copies);
               ``vals.given.min``: the least likely token of the values
               given the source (a value mangled in the copy)
dialogue       ``pmi:_history`` / ``pmi:_last`` / ``pmi:_fact``: the       three likelihood
               text's PMI with the dialogue history, with its last turn    passes (the last
               alone (does it answer what was just said) and with the      turn's and the
               knowledge fact alone; ``rep.history``: the share of the     fact's are short)
               text's word pairs the history already holds (a response
               that echoes the conversation or says only its stock
               phrases); ``fact.none``: 1 where the context gives no
               fact (raters judge groundedness otherwise there)
references     ``ref.given``: the text given the first reference           two likelihood
               (BARTScore precision); ``ref.covers``: the reference        passes
               given the text (recall); ``rouge.1`` / ``rouge.2`` /
               ``rouge.l``: ROUGE F1, best over the references
=============  ==========================================================  ===================

A family's passes are plain likelihood requests of the cached judge; its columns are computed
from their token log-probabilities and from the sample itself (what its words alone tell:
:mod:`hdeval.scoring.text_measures`). Which families a bundle reads is in its card;
``hierarchy.min_family_gain`` drops a family that does not earn its place.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from hdeval.errors import DataValidationError
from hdeval.llm.types import LogLikelihood
from hdeval.params import TaskSpec
from hdeval.scoring.sources import (
    NO_FACT,
    dialogue_parts,
    last_turn,
    lead,
    parse_mr,
    realised,
    sentence_spans,
    value_spans,
)
from hdeval.scoring.text_measures import repeated_trigrams, rouge_values, said_before

#: Words of the source's opening that coverage reads.
LEAD_WORDS = 60


@dataclass(frozen=True)
class FamilyPass:
    """One likelihood request of a family: the continuation read after segments + instruction."""

    name: str
    segments: tuple[str, ...]
    instruction: str
    continuation: str


@dataclass(frozen=True)
class FamilySample:
    """What a family reads of a sample."""

    source: str
    output: str
    references: tuple[str, ...] = ()


def passes(
    family: str, sample: FamilySample, task: TaskSpec, reply_end: str = ""
) -> list[FamilyPass]:
    """The likelihood requests ``family`` makes for ``sample`` (none for sentences,
    repetition, slots); ``reply_end`` follows every whole text read as a reply (the judge's
    end-of-reply marker, ``hierarchy.end_of_text``), never the source's cut opening."""
    text = sample.output.strip()
    reply = text + reply_end
    if family == "coverage":
        opening = lead(sample.source, LEAD_WORDS)
        return [
            FamilyPass(
                "given_text",
                (f"## {task.output_label}\n{text}\n\n",),
                f"## Instructions\nWrite the {task.source_noun} the {task.output_noun} above "
                "was written for, from its beginning.",
                opening,
            ),
            FamilyPass(
                "alone",
                (f"The task is to write a {task.source_noun}.\n\n",),
                f"## Instructions\nWrite a {task.source_noun}.",
                opening,
            ),
        ]
    if family == "dialogue":
        history, fact = dialogue_parts(sample.source)
        ask = f"## Instructions\nWrite a {task.output_noun} for the conversation above."
        return [
            FamilyPass("history", (f"## Conversation history\n{history}\n\n",), ask, reply),
            FamilyPass("last", (f"## Conversation history\n{last_turn(history)}\n\n",), ask, reply),
            FamilyPass(
                "fact",
                (f"## Fact\n{fact}\n\n",),
                f"## Instructions\nWrite a {task.output_noun} that uses the fact above.",
                reply,
            ),
        ]
    if family == "references":
        if not sample.references:
            raise DataValidationError("no references: the references family needs them")
        reference = sample.references[0].strip()
        return [
            FamilyPass(
                "given_reference",
                (f"## Reference {task.output_noun}\n{reference}\n\n",),
                f"## Instructions\nWrite a {task.output_noun} that says what the reference says.",
                reply,
            ),
            FamilyPass(
                "covers_reference",
                (f"## {task.output_label}\n{text}\n\n",),
                f"## Instructions\nWrite a {task.output_noun} that says what the one above says.",
                reference + reply_end,
            ),
        ]
    return []


def values(
    family: str,
    sample: FamilySample,
    results: dict[str, LogLikelihood],
    text_given: LogLikelihood | None,
    text_free: LogLikelihood | None,
    token_count: Callable[[str], int] | None,
) -> dict[str, float]:
    """The columns of ``family`` for ``sample`` from its passes' ``results`` (by pass name) and
    the text's likelihood with and without the source (``text_given``, ``text_free``). A column
    whose inputs failed is left out (NaN in the table). ``token_count`` counts the judge's
    tokens of a string (None: sentences are split by their share of the characters)."""
    if family == "coverage":
        given, alone = results.get("given_text"), results.get("alone")
        out = {} if given is None else {"cov:_text": given.mean}
        if given is not None and alone is not None:
            out["cov.gain:_text"] = given.mean - alone.mean
        return out
    if family == "sentences":
        if text_given is None or text_free is None:
            return {}
        return sentence_values(sample.output.strip(), text_given, text_free, token_count)
    if family == "repetition":
        return {"rep.trigrams:_text": repeated_trigrams(sample.output)}
    if family == "slots":
        spoken = parse_mr(sample.source).spoken_values()
        found = sum(realised(v, sample.output, spoken) for v in spoken)
        share = found / len(spoken) if spoken else 1.0
        return {"slots.realised:_text": share, "slots.omitted:_text": float(len(spoken) - found)}
    if family == "wording":
        if text_given is None or text_free is None:
            return {}
        return wording_values(sample, text_given, text_free, token_count)
    if family == "dialogue":
        history, fact = dialogue_parts(sample.source)
        read = {
            "rep.history:_text": said_before(sample.output, history),
            "fact.none:_text": float(fact == NO_FACT),
        }
        if text_free is None:
            return read
        return {
            f"pmi:_{part}": result.mean - text_free.mean
            for part in ("history", "last", "fact")
            if (result := results.get(part)) is not None
        } | read
    if family == "references":
        out = {
            column: result.mean
            for column, name in (("ref.given:_text", "given_reference"),
                                 ("ref.covers:_text", "covers_reference"))
            if (result := results.get(name)) is not None
        }  # fmt: skip
        out.update(rouge_values(sample.output, sample.references))
        return out
    raise ValueError(f"unknown family {family!r}")


def sentence_values(
    text: str,
    given: LogLikelihood,
    free: LogLikelihood,
    token_count: Callable[[str], int] | None,
) -> dict[str, float]:
    """Per-sentence PMI of ``text`` (mean over its tokens of log p(token | source) - log
    p(token | no source)): its minimum, maximum, the share of sentences at or below 0, and the
    number of sentences."""
    pmi = np.asarray(given.tokens) - np.asarray(free.tokens)
    spans = sentence_spans(text)
    ends = [token_index(text, end, len(pmi), token_count) for _, end in spans]
    ends[-1] = len(pmi)
    per_sentence, start = [], 0
    for end in ends:
        if end > start:
            per_sentence.append(float(pmi[start:end].mean()))
        start = max(start, end)
    if not per_sentence:
        return {}
    scores = np.asarray(per_sentence)
    return {
        "spmi.min:_text": float(scores.min()),
        "spmi.max:_text": float(scores.max()),
        "spmi.neg:_text": float(np.mean(scores <= 0)),
        "len.sents:_text": float(len(spans)),
    }


def wording_values(
    sample: FamilySample,
    given: LogLikelihood,
    free: LogLikelihood,
    token_count: Callable[[str], int] | None,
) -> dict[str, float]:
    """The text's token log-probabilities split into the meaning representation's values
    (:func:`~hdeval.scoring.sources.value_spans`) and the wording around them: the wording's
    mean, minimum and 10th percentile given the source and without it, and the least likely
    value token given the source (0 where the text realises no value; the whole text's tokens
    stand for the wording where it is all values)."""
    text = sample.output.strip()
    n = len(given.tokens)
    is_value = np.zeros(n, dtype=bool)
    for start, end in value_spans(parse_mr(sample.source), text):
        first, last = (token_index(text, p, n, token_count) for p in (start, end))
        is_value[first:last] = True
    wording = ~is_value if (~is_value).any() else np.ones(n, dtype=bool)
    out = {}
    for name, reading in (("given", given), ("free", free)):
        tokens = np.asarray(reading.tokens, dtype=float)[wording]
        out[f"word.{name}:_text"] = float(tokens.mean())
        out[f"word.{name}.min:_text"] = float(tokens.min())
        out[f"word.{name}.p10:_text"] = float(np.percentile(tokens, 10))
    values = np.asarray(given.tokens, dtype=float)[is_value]
    out["vals.given.min:_text"] = float(values.min()) if values.size else 0.0
    return out


def token_index(text: str, position: int, n: int, token_count: Callable[[str], int] | None) -> int:
    """How many of the judge's ``n`` tokens of ``text`` come before the character at
    ``position`` (white space before it not counted); without a tokenizer (``token_count``
    None), the same share of the tokens as of the characters."""
    if token_count is None:
        return round(n * position / max(len(text), 1))
    return min(token_count(text[:position].rstrip()), n)
