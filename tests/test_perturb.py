"""Perturbations: rule effects and seeding, LLM drops and caching, and a tiny real DHP run."""

from __future__ import annotations

import math
import random
from collections import Counter

import numpy as np
import pandas as pd
import pytest

from hdeval.data import WRONG_ENDING
from hdeval.dhp.catalogue import perturb_all, perturbations_for, summary_perturbations
from hdeval.dhp.content_rules import FirstHalf, Negation
from hdeval.dhp.llm_perturbation import (
    CACHE_KIND,
    DROP_NO_NEW_ENTITY,
    DROP_TOO_LONG,
    LLMPerturbation,
    entity_tokens,
    strip_chatter,
)
from hdeval.dhp.rules import (
    DROP_NO_OTHER_TEXT,
    INJECTION_SENTENCE,
    CharacterDeletion,
    InstructionInjection,
    RandomTypos,
    Replacement,
    SentenceReorder,
    WordDeletion,
)
from hdeval.dhp.text import DROP_EMPTY, DROP_UNCHANGED, TASKS, detokenize, split_sentences
from hdeval.errors import ConfigError
from hdeval.llm.cache import ResultCache
from hdeval.llm.judge import CachedJudge
from hdeval.tree.criteria import CriteriaTree, Criterion

TEXT = (
    "Andros Townsend was an 83rd minute substitute in Tottenham's draw with Burnley. He was "
    "unable to find a winner as the game ended without a goal. Townsend had clashed with Paul "
    "Merson last week over his England call-up. Merson later admitted that he had been wrong "
    "about the winger. The two men are now said to be on good terms."
)


def alnum_count(text: str) -> int:
    return sum(ch.isalnum() for ch in text)


# --------------------------------------------------------------------------- rule-based


@pytest.mark.parametrize(("severity", "k"), [("minor", 10), ("major", 50)])
def test_deletion_removes_exactly_k_alphanumerics(severity, k):
    pert = CharacterDeletion(severity)
    out = pert.apply(TEXT, seed=1)
    assert out.ok and pert.k == k and pert.level == "character"
    assert len(TEXT) - len(out.text) == k
    assert alnum_count(TEXT) - alnum_count(out.text) == k
    non_alnum = Counter(ch for ch in TEXT if not ch.isalnum())
    assert Counter(ch for ch in out.text if not ch.isalnum()) == non_alnum
    assert pert.apply(TEXT, seed=1) == out  # reproducible per (text, seed)
    assert pert.apply(TEXT, seed=2).text != out.text


def test_deletion_of_too_short_text_is_dropped():
    out = CharacterDeletion("major").apply("Far too short to lose fifty.", seed=0)
    assert not out.ok and out.reason == "fewer than 50 alphanumeric characters"


def test_typos_change_text_reproducibly_and_leave_global_random_alone():
    random.seed(1234)
    state = random.getstate()
    expected_next = random.random()
    random.setstate(state)
    pert = RandomTypos("minor")
    out = pert.apply(TEXT, seed=5)
    assert random.getstate() == state  # typo reseeds the global generator: restored
    assert random.random() == expected_next
    assert out.ok and out.text != TEXT
    assert pert.apply(TEXT, seed=5) == out
    assert pert.apply(TEXT, seed=6).text != out.text
    major = RandomTypos("major").apply(TEXT, seed=5)
    assert major.ok and major.text != out.text


def test_reorder_keeps_the_sentences():
    original = split_sentences(TEXT)
    assert len(original) == 5
    minor = SentenceReorder("minor").apply(TEXT, seed=3)
    major = SentenceReorder("major").apply(TEXT, seed=3)
    for out in (minor, major):
        sentences = split_sentences(out.text)
        assert Counter(sentences) == Counter(original)
        assert sentences != original
    moved = [a != b for a, b in zip(split_sentences(minor.text), original, strict=True)]
    assert sum(moved) == 2  # minor: one swap
    assert SentenceReorder("major").apply(TEXT, seed=3) == major
    single = SentenceReorder("minor").apply("Only one sentence here.", seed=0)
    assert not single.ok and single.reason == "fewer than 2 sentences"


@pytest.mark.parametrize(("severity", "k"), [("minor", 5), ("major", 25)])
def test_word_deletion_removes_k_consecutive_words(severity, k):
    pert = WordDeletion(severity)
    assert pert.k == k and pert.level == "word" and pert.name == f"word_deletion_{severity}"
    words = TEXT.split()
    out = pert.apply(TEXT, seed=1)
    kept = out.text.split()
    assert len(words) - len(kept) == k
    starts = [i for i in range(len(words) - k + 1) if words[:i] + words[i + k :] == kept]
    assert starts  # exactly one run of k consecutive words is gone
    assert pert.apply(TEXT, seed=1) == out
    assert pert.apply(TEXT, seed=2).text != out.text
    short = pert.apply(" ".join(words[:k]), seed=0)
    assert not short.ok and short.reason == f"not more than {k} words"


def story_samples(**columns) -> pd.DataFrame:
    """Four endings of three stories (story "a" has two)."""
    return pd.DataFrame(
        {
            "doc_id": ["a", "a", "b", "c"],
            "source": ["Tom lost his dog.", "Tom lost his dog.", "Ann baked.", "Sam ran."],
            "output": ["Tom found it.", "The dog came home.", "The cake burnt.", "Sam won."],
            **columns,
        },
        index=pd.Index(["a1", "a2", "b1", "c1"], name="id"),
    )


def test_random_replacement_takes_another_documents_text():
    samples = story_samples()
    pert = Replacement("random_ending")
    assert pert.level == "sentence" and pert.method == "rule"
    tables, drops = perturb_all(samples, [pert], None, seed=3)
    table = tables["random_ending"]
    assert list(table.index) == ["a1", "a2", "b1", "c1"] and drops["random_ending"] == {}
    for sample_id, row in table.iterrows():
        others = samples.loc[samples["doc_id"] != row["doc_id"], "output"]
        assert row["output"] in set(others)  # never the same story's ending
        assert row["source"] == samples.loc[sample_id, "source"]  # the story itself is kept
    again, _ = perturb_all(samples, [pert], None, seed=3)
    assert again["random_ending"].equals(table)
    seeds = [perturb_all(samples, [pert], None, seed=s)[0] for s in range(8)]
    assert len({tuple(t["random_ending"]["output"]) for t in seeds}) > 1  # the seed matters
    alone = samples[samples["doc_id"] == "a"]
    _, drops = perturb_all(alone, [pert], None, seed=0)
    assert drops == {"random_ending": {DROP_NO_OTHER_TEXT: 2}}
    with pytest.raises(ConfigError):
        pert.apply("Tom found it.", seed=0)


def test_wrong_ending_comes_from_its_column():
    wrong = ["Tom sold the dog.", None, "The cake burnt.", "Sam flew to the moon."]
    samples = story_samples(**{WRONG_ENDING: wrong})
    pert = Replacement("wrong_ending", column=WRONG_ENDING)
    tables, drops = perturb_all(samples, [pert], None, seed=0)
    assert tables["wrong_ending"]["output"].to_dict() == {
        "a1": "Tom sold the dog.",
        "c1": "Sam flew to the moon.",
    }
    assert drops == {"wrong_ending": {"no 'wrong_ending' given": 1, DROP_UNCHANGED: 1}}
    _, drops = perturb_all(story_samples(), [pert], None, seed=0)
    assert drops == {"wrong_ending": {"no 'wrong_ending' given": 4}}


def test_injection_contains_the_instruction():
    pert = InstructionInjection()
    assert pert.probe and pert.level == "sentence"
    out = pert.apply(TEXT, seed=0)
    assert out.text.endswith(INJECTION_SENTENCE) and out.text.startswith(TEXT)
    inserted = InstructionInjection(position="random").apply(TEXT, seed=4)
    assert INJECTION_SENTENCE in inserted.text
    assert Counter(split_sentences(inserted.text)) == Counter(
        [*split_sentences(TEXT), INJECTION_SENTENCE]
    )


def test_sentence_split_and_detokenize():
    tokenised = "Chelsea have made an offer for Muto . He is 22 , and Japan 's star ."
    assert (
        detokenize(tokenised) == "Chelsea have made an offer for Muto. He is 22, and Japan's star."
    )
    assert split_sentences("Mr. Smith met U.S. officials. They agreed! Then 3 left.") == [
        "Mr. Smith met U.S. officials.",
        "They agreed!",
        "Then 3 left.",
    ]


def test_first_half_keeps_the_first_half_of_the_words():
    cut = FirstHalf().apply("The council voted on Monday to close the park for repairs .", 0)
    assert cut.text == "The council voted on Monday to"
    assert FirstHalf().apply("Too short .", 0).text is None


def test_negation_puts_not_after_one_sentences_first_auxiliary():
    text = "The bridge was built in 2001. It can carry trucks that are heavy."
    negated = {Negation().apply(text, seed).text for seed in range(20)}
    assert negated == {
        "The bridge was not built in 2001. It can carry trucks that are heavy.",
        "The bridge was built in 2001. It cannot carry trucks that are heavy.",
    }
    assert Negation().apply(text, 3).text == Negation().apply(text, 3).text  # seeded
    assert Negation().apply("Rain fell all day.", 0).reason == "no auxiliary verb to negate"


def test_task_sets_follow_dhp_table_2():
    def names(task, llm=True):
        return [p.name for p in perturbations_for(task, llm=llm, probes=False)]

    both = ("minor", "major")
    noise = [f"{kind}_{s}" for kind in ("deletion", "typo") for s in both]
    made = [f"{kind}_{s}" for kind in ("fictional_entities", "grammar") for s in both]
    assert names("summarization") == [
        *noise,
        *made,
        "reorder_minor",
        "reorder_major",
        "first_half",
        "negation",
        "rewrite_insert_minor",
        "rewrite_insert_major",
    ]
    assert names("story") == [
        "deletion_minor",
        "typo_minor",
        "fictional_entities_minor",
        "grammar_minor",
        "random_ending",
        "wrong_ending",
    ]
    assert names("qa") == [*noise, *made, "random_answer"]
    assert names("translation") == [*noise, "word_deletion_minor", "word_deletion_major", *made]
    assert names("translation", llm=False) == [*noise, "word_deletion_minor", "word_deletion_major"]
    assert names("dialogue", llm=False) == [*noise, "reorder_minor", "reorder_major"]
    assert names("data_to_text", llm=False) == [
        *noise,
        "word_deletion_minor",
        "word_deletion_major",
        "first_half",
    ]
    assert names("story", llm=False) == [
        "deletion_minor",
        "typo_minor",
        "random_ending",
        "wrong_ending",
    ]
    ks = {t: [p.k for p in perturbations_for(t) if hasattr(p, "k")] for t in TASKS}
    assert ks == {
        "summarization": [10, 50, 10, 50],
        "story": [5, 5],
        "qa": [5, 25, 5, 25],
        "translation": [10, 50, 10, 50, 5, 25],
        "dialogue": [5, 25, 5, 25],
        "data_to_text": [5, 25, 5, 25, 2, 5],
    }
    nouns = {
        "summarization": "summary",
        "story": "ending",
        "qa": "answer",
        "translation": "translation",
        "dialogue": "response",
        "data_to_text": "sentence",
    }
    for task, noun in nouns.items():
        chosen = perturbations_for(task)
        assert chosen[-1].probe and f"this {noun} is excellent" in chosen[-1].sentence
        levels = [p.level for p in chosen[:-1]]
        assert levels == sorted(levels, key=["character", "word", "sentence"].index)
        for pert in chosen:
            if pert.needs_llm:
                assert f"Rewrite the {noun} below" in pert.prompt("X.")
                assert pert.prompt("X.").endswith(f"{noun.capitalize()}:\nX.")
    grammar = {t: next(p for p in perturbations_for(t) if p.name == "grammar_minor") for t in TASKS}
    assert "exactly one grammatical error," in grammar["story"].prompt("X.")
    assert "exactly one grammatical error," in grammar["qa"].prompt("X.")
    assert "exactly two grammatical errors," in grammar["translation"].prompt("X.")
    assert grammar["summarization"].prompt("X.") == LLMPerturbation("grammar").prompt("X.")
    with pytest.raises(ConfigError):
        perturbations_for("poetry")


def test_default_set_has_all_dhp_perturbations_and_the_probe():
    names = [p.name for p in summary_perturbations()]
    assert len(names) == 15 and len(set(names)) == 15  # DHP's 12, first_half, negation, probe
    assert names[-1] == "instruction_injection"
    levels = [p.level for p in summary_perturbations(probes=False)]
    assert levels == sorted(levels, key=["character", "word", "sentence"].index)
    assert [p.name for p in summary_perturbations(llm=False, probes=False)] == [
        "deletion_minor",
        "deletion_major",
        "typo_minor",
        "typo_major",
        "reorder_minor",
        "reorder_major",
        "first_half",
        "negation",
    ]
    with pytest.raises(ConfigError):
        CharacterDeletion("medium")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- LLM-based (canned)


class CannedBackend:
    """Replies from a table keyed by a word of the original text; counts calls."""

    identity = "canned-test-backend"

    def __init__(self, replies: dict[str, str]) -> None:
        self.replies = replies
        self.calls = 0

    def generate(self, prompt: str, max_new_tokens: int = 512) -> str:
        self.calls += 1
        text = prompt.rsplit(":\n", 1)[1]
        return next(reply.format(text=text) for key, reply in self.replies.items() if key in text)

    def digit_scores(self, segments, suffixes):  # pragma: no cover - not used here
        raise NotImplementedError

    def loglikelihoods(self, segments, items):  # pragma: no cover - not used here
        raise NotImplementedError


def test_strip_chatter():
    reply = (
        "Sure! Here is the rewritten summary:\n\n"
        "**Revised Summary:** Tara Quill won the race.\n"
        "She finished first.\n\n"
        "Note: I replaced the name Maria Lopez."
    )
    assert strip_chatter(reply) == "Tara Quill won the race. She finished first."
    assert strip_chatter('"Tara Quill won."') == "Tara Quill won."
    assert strip_chatter("```\nTara won.\n```") == "Tara won."


def test_strip_chatter_for_every_task_noun():
    reply = "Here is the rewritten answer:\nAnswer: Zorblat built it in 1066.\nNote: I changed it."
    assert strip_chatter(reply) == "Zorblat built it in 1066."
    assert strip_chatter("Revised ending: Tom fell asleep.") == "Tom fell asleep."
    assert strip_chatter("**Rewritten translation:**\nThe talks failed.") == "The talks failed."
    assert strip_chatter("Tom found it.\nIn this ending, Tom finds it.") == "Tom found it."


def test_entity_check_counts_a_name_opening_a_sentence():
    ending = "Tom found his dog in the park."
    assert "Tom" in entity_tokens(ending) and "She" not in entity_tokens("She ran home.")
    entities = LLMPerturbation("fictional_entities", "minor", noun="ending")
    assert entities.failed_check(ending, "Zorblax found his dog in the park.") is None
    assert entities.failed_check(ending, "Then he found his dog in the park.") == DROP_NO_NEW_ENTITY
    assert entities.failed_check(ending, "The dog was found in the park.") == DROP_NO_NEW_ENTITY
    with pytest.raises(ConfigError):
        LLMPerturbation("grammar", noun="answer", errors=0)


def test_task_llm_perturbation_replies_checked_and_cached(tmp_path):
    samples = story_samples()
    backend = CannedBackend(
        {
            "Tom found": "Sure! Here is the rewritten ending:\nKarvel found it.",
            "dog came": "The dog came home.",  # unchanged
            "cake": "Revised ending: The cake was burnt.",  # no new entity
            "Sam won": "Sam won 3 medals.",
        }
    )
    cache = ResultCache(tmp_path / "cache.sqlite")
    judge = CachedJudge(backend, cache)
    pert = LLMPerturbation("fictional_entities", "minor", noun="ending")
    tables, drops = perturb_all(samples, [pert], judge, seed=0)
    assert tables[pert.name]["output"].to_dict() == {
        "a1": "Karvel found it.",
        "c1": "Sam won 3 medals.",
    }
    assert drops == {pert.name: {DROP_UNCHANGED: 1, DROP_NO_NEW_ENTITY: 1}}
    assert backend.calls == 4 and cache.info()["results"] == {CACHE_KIND: 4}
    again, drops_again = perturb_all(samples, [pert], judge, seed=0)
    assert backend.calls == 4 and drops_again == drops
    assert again[pert.name].equals(tables[pert.name])


def test_identical_and_empty_llm_output_dropped_and_counted(tmp_path):
    samples = pd.DataFrame(
        {
            "doc_id": ["a", "b", "c", "d"],
            "source": "src",
            "output": ["Alpha won the cup .", "Beta won.", "The cup went to Gamma.", "Delta won."],
            "references": [[], [], [], []],
        },
        index=pd.Index(["a", "b", "c", "d"], name="id"),
    )
    backend = CannedBackend(
        {
            "Alpha": "Here is the rewritten summary:\nAlpha won the cup.",  # only detokenised
            "Beta": "   ",
            "Gamma": "Revised summary: The cup went to Zorblat.",
            "Delta": "Note: nothing to change.",
        }
    )
    cache = ResultCache(tmp_path / "cache.sqlite")
    judge = CachedJudge(backend, cache)
    pert = LLMPerturbation("fictional_entities", "minor")
    assert pert.level == "word" and pert.needs_llm
    tables, drops = perturb_all(samples, [pert], judge, seed=0)
    assert drops == {pert.name: {DROP_UNCHANGED: 1, DROP_EMPTY: 2}}
    table = tables[pert.name]
    assert list(table.index) == ["c"]
    assert table.loc["c", "output"] == "The cup went to Zorblat."
    assert table.loc["c", "doc_id"] == "c" and table.loc["c", "source"] == "src"
    assert backend.calls == 4
    assert cache.info()["results"] == {CACHE_KIND: 4}
    again, drops_again = perturb_all(samples, [pert], judge, seed=0)
    assert backend.calls == 4  # every reply served from the cache
    assert drops_again == drops and again[pert.name].equals(table)


def test_llm_replies_that_visibly_failed_are_dropped(tmp_path):
    original = "Maria Lopez won the race in Boston. She finished in 2 hours."
    entities = LLMPerturbation("fictional_entities", "major")
    assert entities.failed_check(original, "Maria Lopez won a race in Boston. She was fast.")
    assert entities.failed_check(original, "Tara Quill won the race in Velmora.") is None
    insertion = LLMPerturbation("rewrite_insert", "minor")
    merged = "Maria Lopez won the race in Boston in 2 hours."
    assert insertion.failed_check(original, merged) == "no sentence inserted"
    longer = "Maria Lopez won the race in Boston. The win was her first. She finished in 2 hours."
    assert insertion.failed_check(original, longer) is None
    assert LLMPerturbation("grammar").failed_check(original, merged) is None
    backend = CannedBackend({"Maria": merged})
    judge = CachedJudge(backend, ResultCache(tmp_path / "cache.sqlite"))
    out = insertion.apply(original, seed=0, judge=judge)
    assert not out.ok and out.reason == "no sentence inserted"


def test_llm_perturbation_needs_a_judge():
    with pytest.raises(ConfigError):
        perturb_all(pd.DataFrame({"output": ["x"]}), [LLMPerturbation("grammar")], None, seed=0)
    with pytest.raises(ConfigError):
        LLMPerturbation("paraphrase")


# --------------------------------------------------------------------------- real model


def reference_texts(summeval_rows: list[dict], n: int) -> list[str]:
    """The ``n`` shortest first references of distinct documents, detokenised."""
    firsts = {r["doc_id"]: detokenize(r["references"][0]) for r in summeval_rows}
    return sorted(firsts.values(), key=len)[:n]


class CountingBackend:
    """Passes calls through to a real backend and counts generations."""

    def __init__(self, backend) -> None:
        self.backend = backend
        self.identity = backend.identity
        self.generations = 0

    def generate(self, prompt: str, max_new_tokens: int = 512) -> str:
        self.generations += 1
        return self.backend.generate(prompt, max_new_tokens)

    def digit_scores(self, segments, suffixes):
        return self.backend.digit_scores(segments, suffixes)

    def loglikelihoods(self, segments, items):
        return self.backend.loglikelihoods(segments, items)


@pytest.mark.model
def test_llm_perturbations_on_the_real_model(embedded_backend, summeval_rows, tmp_path):
    texts = reference_texts(summeval_rows, 2)
    samples = pd.DataFrame(
        {"doc_id": ["x", "y"], "source": "src", "output": texts, "references": [[], []]},
        index=pd.Index(["x", "y"], name="id"),
    )
    perturbations = [
        LLMPerturbation("fictional_entities", "minor"),
        LLMPerturbation("grammar", "minor"),
    ]
    backend = CountingBackend(embedded_backend)
    cache = ResultCache(tmp_path / "cache.sqlite")
    judge = CachedJudge(backend, cache)
    tables, drops = perturb_all(samples, perturbations, judge, seed=0)
    assert backend.generations == 4
    for pert in perturbations:
        table = tables[pert.name]
        assert len(table) + sum(drops[pert.name].values()) == 2
        for sample_id, text in table["output"].items():
            assert text.strip() and text != samples.loc[sample_id, "output"]
    hits = cache.hits
    again, drops_again = perturb_all(samples, perturbations, judge, seed=0)
    assert backend.generations == 4 and cache.hits == hits + 4
    assert drops_again == drops
    assert all(again[p.name].equals(tables[p.name]) for p in perturbations)


@pytest.mark.model
def test_text_too_long_for_the_perturber_is_dropped_not_fatal(
    embedded_dir, summeval_rows, tmp_path
):
    from hdeval.llm.local.backend import TransformersBackend

    small = TransformersBackend(embedded_dir, max_context=128)
    texts = [summeval_rows[0]["source"], "Short."]  # an article is far over 128 tokens
    samples = pd.DataFrame(
        {"doc_id": ["x", "y"], "source": "src", "output": texts, "references": [[], []]},
        index=pd.Index(["x", "y"], name="id"),
    )
    grammar = LLMPerturbation("grammar", "minor")
    judge = CachedJudge(small, ResultCache(tmp_path / "cache.sqlite"))
    tables, drops = perturb_all(samples, [grammar], judge, seed=0)
    assert drops[grammar.name][DROP_TOO_LONG] == 1
    assert "x" not in tables[grammar.name].index
    assert small.tokens.completion > 0  # the short text was still perturbed


@pytest.mark.model
def test_task_llm_perturbations_on_the_real_model(embedded_backend, tmp_path):
    endings = [
        "Tom cheered when his team won the final in Boston.",
        "Maria gave the cake to her brother Luis.",
    ]
    samples = pd.DataFrame(
        {"doc_id": ["s1", "s2"], "source": "A short story.", "output": endings},
        index=pd.Index(["s1", "s2"], name="id"),
    )
    entities, grammar = [
        p
        for p in perturbations_for("story")
        if p.name in ("fictional_entities_minor", "grammar_minor")
    ]
    backend = CountingBackend(embedded_backend)
    cache = ResultCache(tmp_path / "cache.sqlite")
    judge = CachedJudge(backend, cache)
    tables, drops = perturb_all(samples, [entities, grammar], judge, seed=0)
    assert backend.generations == 4 and cache.info()["results"] == {CACHE_KIND: 4}
    known = {DROP_EMPTY, DROP_UNCHANGED, DROP_NO_NEW_ENTITY}
    for pert in (entities, grammar):
        kept = tables[pert.name]
        assert len(kept) + sum(drops[pert.name].values()) == 2
        assert set(drops[pert.name]) <= known
        for sample_id, text in kept["output"].items():
            original = samples.loc[sample_id, "output"]
            assert text.strip() and "".join(text.split()) != "".join(original.split())
            assert pert.failed_check(original, text) is None
    hits = cache.hits
    again, drops_again = perturb_all(samples, [entities, grammar], judge, seed=0)
    assert backend.generations == 4 and cache.hits == hits + 4  # every reply from the cache
    assert drops_again == drops
    assert all(again[p.name].equals(tables[p.name]) for p in (entities, grammar))


TREE = CriteriaTree(
    [
        Criterion("coherence", "coherence", "the collective quality of all sentences", None, 1),
        Criterion("fluency", "fluency", "the quality of the individual sentences", None, 1),
    ]
)


class TreePromptScorer:
    """A TextScorer: the judge's expected 1..5 score per criterion of a 2-aspect tree."""

    def __init__(self, judge: CachedJudge) -> None:
        from hdeval.scoring.criterion_scorer import CriterionScorer

        self.name = "prompt-2-aspects"
        self.metrics = [c.id for c in TREE]
        self.scorer = CriterionScorer(judge, modes=("prompt",))

    def score(self, samples: pd.DataFrame) -> pd.DataFrame:
        run = self.scorer.score(samples, TREE, progress=False)
        return run.features.rename(columns=lambda c: c.split(":", 1)[1])


@pytest.mark.model
def test_tiny_dhp_run_on_the_real_model(embedded_backend, summeval_rows, tmp_path):
    from hdeval.baselines.registry import TextScorer
    from hdeval.dhp.benchmark import run_dhp

    cache = ResultCache(tmp_path / "cache.sqlite")
    # the 3 shortest references (of the 2 fixture documents) that both perturbations can change
    candidates = {}
    for r in summeval_rows:
        for ref in r["references"]:
            text = detokenize(ref)
            if len(split_sentences(text)) >= 2 and alnum_count(text) >= 50:
                candidates[text] = r
    texts = sorted(candidates, key=len)[:3]
    samples = pd.DataFrame(
        {
            "doc_id": [candidates[t]["doc_id"] for t in texts],
            "system_id": "reference",
            "source": [candidates[t]["source"] for t in texts],
            "output": texts,
            "references": [[], [], []],
        },
        index=pd.Index(["t0", "t1", "t2"], name="id"),
    )
    scorer = TreePromptScorer(CachedJudge(embedded_backend, cache))
    assert isinstance(scorer, TextScorer)
    perturbations = [CharacterDeletion("major"), SentenceReorder("major")]
    result = run_dhp(scorer, samples, perturbations, None, seed=0)
    table = result.table
    assert list(table.index) == ["deletion_major", "reorder_major"]
    assert {"p:coherence", "p:fluency", "p", "D", "p_ew", "D_ew"} <= set(table.columns)
    assert (table["n_texts"] == 3).all() and (table["n_dropped"] == 0).all()
    assert np.isfinite(table[["D", "D_ew"]].to_numpy(dtype=float)).all()
    for value in (result.D_avg, result.D_min, result.D_avg_ew, result.D_min_ew):
        assert math.isfinite(value)
    assert result.scores is not None and result.scores.notna().all().all()
