"""The feature-column protocol: how a judge's scores of a text are named in a feature table.

A column is ``<signal>[.<statistic>]:<target>``:

- ``prompt:<criterion id>``: the expected 1..5 score of the hierarchy-aware prompt;
- ``lik:<criterion id>``: the judge's token log-probabilities of the text given the source and
  an instruction naming the criterion, summarised by a statistic (``lik:`` is their mean,
  ``lik.p10:`` their 10th percentile...; :mod:`hdeval.scoring.likelihood_stats`);
- the text's own signals, whose target starts with ``_``: ``lik:_text`` (:data:`UNCONDITIONED`,
  given the source, no criterion named), ``lik:_free`` (:data:`SOURCE_FREE`, without the source:
  the judge's prior, fluency), ``pmi:_text`` and ``pmi.sum:_text`` (the first minus the second,
  per token and in total: how much the source explains the text, grounding) and
  ``len.words:_text`` (the text's length in words: whitespace-separated, so a typo that splits a
  word into more tokens does not lengthen the text).

Every column has an orientation (:func:`orientation`): higher is better, lower is better, or
neither (length, which is not a quality judgement). Every module that builds or reads feature
columns goes through these functions.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from hdeval.errors import HDEvalError
from hdeval.params import HierarchyParams, Mode
from hdeval.scoring.family_columns import FAMILY_COLUMNS, GROUPS, ORIENTATIONS, WORDS, family_of
from hdeval.scoring.likelihood_stats import STATISTICS

PROMPT = "prompt"
LIKELIHOOD = "lik"
PMI = "pmi"
LENGTH = "len"
TEXT = "_text"
FREE = "_free"
UNCONDITIONED = f"{LIKELIHOOD}:{TEXT}"
SOURCE_FREE = f"{LIKELIHOOD}:{FREE}"
PMI_MEAN = f"{PMI}:{TEXT}"
PMI_SUM = f"{PMI}.sum:{TEXT}"
TEXT_LENGTH = f"{LENGTH}.words:{TEXT}"
MEAN = "mean"
_SIGNAL_OF_MODE: dict[str, str] = {"prompt": PROMPT, "likelihood": LIKELIHOOD}
#: The signals each scoring mode's requests give (PMI and length come with the text's
#: likelihoods, as every signal family's columns do: :func:`of_mode`).
_MODE_SIGNALS: dict[str, tuple[str, ...]] = {
    "prompt": (PROMPT,),
    "likelihood": (LIKELIHOOD, PMI, LENGTH),
}


@dataclass(frozen=True)
class Profile:
    """How likelihoods become columns (``hierarchy.likelihood_stats``, ``source_free``,
    ``length``, ``families``, ``end_of_text``): the statistics of every likelihood column,
    which of the text's own signals come with :data:`UNCONDITIONED`, and whether the text is
    read as a whole reply."""

    stats: tuple[str, ...] = (MEAN,)
    source_free: bool = False
    length: bool = False
    families: tuple[str, ...] = ()
    end_of_text: bool = False

    @classmethod
    def of(cls, hierarchy: HierarchyParams) -> Profile:
        return cls(
            tuple(hierarchy.likelihood_stats),
            hierarchy.source_free,
            hierarchy.length,
            tuple(hierarchy.families),
            hierarchy.end_of_text,
        )

    def likelihood_columns(self, target: str) -> list[str]:
        """The likelihood columns of ``target`` (a criterion id, :data:`TEXT` or :data:`FREE`)."""
        return [
            f"{LIKELIHOOD}:{target}" if stat == MEAN else f"{LIKELIHOOD}.{stat}:{target}"
            for stat in self.stats
        ]

    def text_columns(self) -> list[str]:
        """The text's own signals, in order."""
        columns = self.likelihood_columns(TEXT)
        if self.source_free:
            columns += [*self.likelihood_columns(FREE), PMI_MEAN, PMI_SUM]
        if self.length:
            columns.append(TEXT_LENGTH)
        for family in self.families:
            columns += FAMILY_COLUMNS[family]
        return columns


def column(mode: Mode, criterion_id: str, stat: str = MEAN) -> str:
    """The column of ``criterion_id`` scored in ``mode`` (likelihood, coh -> ``lik:coh``;
    with ``stat`` p10 -> ``lik.p10:coh``)."""
    signal = _SIGNAL_OF_MODE[mode]
    return f"{signal}:{criterion_id}" if stat == MEAN else f"{signal}.{stat}:{criterion_id}"


def criterion_of(name: str) -> str:
    """The target of a column: the text after the first ":" (``lik.p10:coh`` -> ``coh``).

    A name without ":" is a criterion id itself.
    """
    return name.split(":", 1)[1] if ":" in name else name


def source_of(name: str) -> str | None:
    """The signal of a column, without its statistic (``lik.p10:coh`` -> ``lik``)."""
    return name.split(":", 1)[0].split(".", 1)[0] if ":" in name else None


def stat_of(name: str) -> str:
    """The statistic of a column (``lik.p10:coh`` -> ``p10``; ``lik:coh`` -> ``mean``)."""
    head = name.split(":", 1)[0]
    return head.split(".", 1)[1] if "." in head else MEAN


def is_text_signal(name: str) -> bool:
    """Whether a column is one of the text's own signals rather than a criterion's score."""
    return criterion_of(name).startswith("_")


def of_mode(columns: Iterable[str], mode: Mode) -> list[str]:
    """The columns scored in ``mode``, in order (the text's own signals and every signal
    family's columns count as likelihood)."""
    likelihood = mode == "likelihood"
    return [
        c
        for c in columns
        if source_of(c) in _MODE_SIGNALS[mode] or (likelihood and family_of(c) is not None)
    ]


def orientation(name: str) -> int:
    """+1 where a higher value means a better text, -1 where lower does, 0 where neither
    (the text's length is not a quality judgement)."""
    signal, head = source_of(name), name.split(":", 1)[0]
    if head in ORIENTATIONS:
        return ORIENTATIONS[head]
    if signal == LENGTH:
        return 0
    if signal == LIKELIHOOD:
        return 1 if STATISTICS[stat_of(name)].higher_is_better else -1
    return 1


def describe(name: str) -> str:
    """What a column measures, in words (``lik.p10:_free`` -> "fluency without the source:
    10th-percentile token")."""
    signal, target = source_of(name), criterion_of(name)
    if family_of(name) is not None:
        return WORDS.get(name.split(":", 1)[0], WORDS.get(name, name))
    if signal == PROMPT:
        return f"1-5 prompt score of {target}"
    if signal == LENGTH:
        return "length in words (not a quality judgement)"
    if signal == PMI:
        way = "total" if stat_of(name) == "sum" else "per token"
        return f"grounding in the source (pointwise mutual information, {way})"
    if signal == LIKELIHOOD:
        what = STATISTICS[stat_of(name)].words
        if target == TEXT:
            return f"likelihood given the source: {what}"
        if target == FREE:
            return f"fluency without the source: {what}"
        return f"likelihood under {target}: {what}"
    return name


#: What the text's own signals are called where contributions are grouped (:func:`group_of`).
TEXT_GROUPS = {
    LIKELIHOOD: "likelihood given the source",
    "free": "fluency without the source",
    PMI: "grounding in the source (PMI)",
    LENGTH: "length",
}


def group_of(name: str) -> str:
    """The group a column's contribution counts towards in an explanation: its criterion's id
    (every statistic and mode of it together), or, for the text's own signals, what they
    measure in words (``lik.p10:_free`` -> "fluency without the source")."""
    target = criterion_of(name)
    if not target.startswith("_"):
        return target
    head = name.split(":", 1)[0]
    if family_of(name) is not None:
        return GROUPS.get(head, GROUPS.get(source_of(name) or "", WORDS.get(name, target)))
    signal = "free" if target == FREE else source_of(name)
    return TEXT_GROUPS.get(signal or "", target)


def feature_columns(
    criterion_ids: Sequence[str],
    modes: Sequence[Mode],
    unconditioned: bool | None = None,
    profile: Profile = Profile(),
) -> list[str]:
    """Every column of ``criterion_ids`` in ``modes``: prompt columns, then likelihood columns
    (per criterion, each statistic of ``profile``), then the text's own signals
    (:meth:`Profile.text_columns`) when ``unconditioned`` (None: with the likelihood mode)."""
    columns = [column("prompt", c) for c in criterion_ids] if "prompt" in modes else []
    if "likelihood" in modes:
        columns += [name for c in criterion_ids for name in profile.likelihood_columns(c)]
    if with_unconditioned(modes, unconditioned):
        columns += profile.text_columns()
    return columns


def with_unconditioned(modes: Sequence[Mode], unconditioned: bool | None) -> bool:
    """Whether :data:`UNCONDITIONED` (and the text's other signals) is scored: as
    ``unconditioned`` says, or, when it is None, with the likelihood mode. It can be scored
    without that mode, once mode pruning has dropped the criterion-conditioned likelihoods but
    kept the text's own."""
    return "likelihood" in modes if unconditioned is None else unconditioned


def check_failed_shares(features, max_share: float) -> None:
    """Refuse a feature table (pandas, NaN = failed score) in which some column has more failed
    scores than ``max_share`` of its rows, naming those columns (``hierarchy.max_failed_share``).
    """
    shares = features.isna().mean() if len(features) else features.isna().sum()
    over = [(name, float(share)) for name, share in shares.items() if share > max_share]
    if over:
        named = ", ".join(f"{name} ({share:.0%})" for name, share in over[:10])
        more = f" and {len(over) - 10} more" if len(over) > 10 else ""
        raise HDEvalError(
            f"refusing to fit on these criterion scores: the judge failed on more than "
            f"hierarchy.max_failed_share={max_share:g} of the {len(features)} training rows "
            f"for {named}{more}; fix the judge (the failures are in the cache: hdeval cache "
            "info) or raise the share"
        )
