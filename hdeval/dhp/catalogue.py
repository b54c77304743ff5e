"""Each DHP task's perturbation set (DHP Table 2) and the driver that applies a set to a table."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

import pandas as pd

from hdeval.data import WRONG_ENDING
from hdeval.dhp.content_rules import FirstHalf, Negation
from hdeval.dhp.llm_perturbation import LLMPerturbation
from hdeval.dhp.rules import (
    INJECTION_TEMPLATE,
    CharacterDeletion,
    InstructionInjection,
    Perturbation,
    RandomTypos,
    Replacement,
    SentenceReorder,
    WordDeletion,
)
from hdeval.dhp.text import LEVELS, TASKS, TEXT_NOUNS, Severity
from hdeval.errors import ConfigError
from hdeval.llm.judge import CachedJudge

# --------------------------------------------------------------------------- sets


def perturbations_for(
    task: str = "summarization", llm: bool = True, probes: bool = True
) -> list[Perturbation]:
    """DHP's perturbations of ``task`` (Table 2) by level, then, if ``probes``, the injection probe.

    ``llm`` adds the LLM-based ones. Summaries, answers and translations get a minor and a major
    degree of each; story endings (about one short sentence) one degree, as in the paper. The
    wrong ending needs a :data:`~hdeval.data.WRONG_ENDING` column in the samples (label files give
    it as the optional ``wrong_ending`` field).
    """
    if task not in TASKS:
        raise ConfigError(f"unknown DHP task {task!r}; choose from {list(TASKS)}")
    noun = TEXT_NOUNS[task]
    both: tuple[Severity, Severity] = ("minor", "major")
    rule: list[Perturbation]
    if task == "story":
        rule = [
            CharacterDeletion("minor", k=5),
            RandomTypos("minor", k=5),
            Replacement("random_ending"),
            Replacement("wrong_ending", column=WRONG_ENDING),
        ]
        made = [
            LLMPerturbation("fictional_entities", "minor", noun),
            LLMPerturbation("grammar", "minor", noun, errors=1),
        ]
    elif task in ("dialogue", "data_to_text"):
        rule, made = _short_text_rules(task, noun)
    else:
        minor_k, major_k = (5, 25) if task == "qa" else (10, 50)
        rule = [
            CharacterDeletion("minor", minor_k),
            CharacterDeletion("major", major_k),
            RandomTypos("minor", minor_k),
            RandomTypos("major", major_k),
        ]
        kinds = ["fictional_entities", "grammar"]
        if task == "summarization":
            rule += [SentenceReorder(s) for s in both] + [FirstHalf(), Negation()]
            kinds.append("rewrite_insert")
        elif task == "qa":
            rule.append(Replacement("random_answer"))
        else:
            rule += [WordDeletion(s) for s in both]
        errors = 1 if task == "qa" else 2
        made = [LLMPerturbation(kind, s, noun, errors) for kind in kinds for s in both]
    chosen = rule + (made if llm else [])
    chosen.sort(key=lambda p: LEVELS.index(p.level))
    if probes:
        chosen.append(InstructionInjection(INJECTION_TEMPLATE.format(noun=noun)))
    return chosen


def _short_text_rules(task: str, noun: str) -> tuple[list[Perturbation], list[Perturbation]]:
    """Our sets for dialogue responses and data-to-text sentences (not in DHP): a response or
    sentence is one to three short sentences, so k = 5/25 character deletions and typos (as for
    answers) and one grammar error. Dialogue responses get sentence reordering (Topical-Chat is
    lower-cased, so sentences may start lower-case); data-to-text outputs are mostly one sentence,
    so instead 2/5 consecutive words are deleted (an omitted slot value hurts informativeness).
    """
    both: tuple[Severity, Severity] = ("minor", "major")
    rule: list[Perturbation] = [
        CharacterDeletion("minor", 5),
        CharacterDeletion("major", 25),
        RandomTypos("minor", 5),
        RandomTypos("major", 25),
    ]
    if task == "dialogue":
        rule += [SentenceReorder(s, any_case=True) for s in both]
    else:
        rule += [WordDeletion("minor", 2), WordDeletion("major", 5), FirstHalf()]
    made: list[Perturbation] = [
        LLMPerturbation(kind, s, noun, 1)
        for kind in ("fictional_entities", "grammar")
        for s in both
    ]
    return rule, made


def summary_perturbations(llm: bool = True, probes: bool = True) -> list[Perturbation]:
    """All DHP summary perturbations (Table 2) and, if ``probes``, the injection probe."""
    return perturbations_for("summarization", llm, probes)


# --------------------------------------------------------------------------- tables


def perturb_all(
    samples: pd.DataFrame,
    perturbations: Sequence[Perturbation],
    judge: CachedJudge | None,
    seed: int,
    progress: Callable[[str, int, int], None] | None = None,
) -> tuple[dict[str, pd.DataFrame], dict[str, dict[str, int]]]:
    """Perturb the ``output`` of every sample with every perturbation.

    Returns (perturbed tables by perturbation name, drop counts by name and reason). A perturbed
    table keeps the ids and columns of ``samples`` for the rows that were not dropped, with the
    new text in ``output``. ``progress(name, done, total)`` is called after each text.
    """
    names = [p.name for p in perturbations]
    duplicated = sorted(n for n, c in Counter(names).items() if c > 1)
    if duplicated:
        raise ConfigError(f"perturbation names must be unique, repeated: {duplicated}")
    if judge is None and any(p.needs_llm for p in perturbations):
        raise ConfigError("LLM-based perturbations need a judge")
    tables: dict[str, pd.DataFrame] = {}
    drops: dict[str, dict[str, int]] = {}
    for perturbation in perturbations:
        kept_ids, texts = [], []
        reasons: Counter[str] = Counter()
        for done, (sample_id, row) in enumerate(samples.iterrows(), start=1):
            result = perturbation.perturb_row(row, samples, seed, judge)
            if result.ok:
                kept_ids.append(sample_id)
                texts.append(result.text)
            else:
                reasons[result.reason or "dropped"] += 1
            if progress is not None:
                progress(perturbation.name, done, len(samples))
        table = samples.loc[kept_ids].copy()
        table["output"] = pd.Series(texts, index=table.index, dtype=object)
        tables[perturbation.name] = table
        drops[perturbation.name] = dict(reasons)
    return tables, drops
