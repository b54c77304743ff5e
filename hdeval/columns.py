"""The feature-column protocol: how a criterion score is named in a feature table.

``prompt:<criterion id>`` is the expected 1..5 score of the hierarchy-aware prompt,
``lik:<criterion id>`` the mean token log-likelihood of the text given an instruction naming the
criterion, and ``lik:_text`` (:data:`UNCONDITIONED`) the same without any criterion. Every module
that builds or reads feature columns goes through these functions.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from hdeval.errors import HDEvalError
from hdeval.params import Mode

PROMPT = "prompt"
LIKELIHOOD = "lik"
UNCONDITIONED = f"{LIKELIHOOD}:_text"
_SOURCE_OF_MODE: dict[str, str] = {"prompt": PROMPT, "likelihood": LIKELIHOOD}


def column(mode: Mode, criterion_id: str) -> str:
    """The column of ``criterion_id`` scored in ``mode`` (likelihood, coh -> ``lik:coh``)."""
    return f"{_SOURCE_OF_MODE[mode]}:{criterion_id}"


def criterion_of(name: str) -> str:
    """The criterion id of a column: the text after the first ":" (``lik:coh`` -> ``coh``).

    A name without ":" is a criterion id itself.
    """
    return name.split(":", 1)[1] if ":" in name else name


def source_of(name: str) -> str | None:
    """The feature source of a column: the text before the first ":" (``lik:coh`` -> ``lik``)."""
    return name.split(":", 1)[0] if ":" in name else None


def of_mode(columns: Iterable[str], mode: Mode) -> list[str]:
    """The columns scored in ``mode``, in order."""
    return [c for c in columns if source_of(c) == _SOURCE_OF_MODE[mode]]


def feature_columns(
    criterion_ids: Sequence[str], modes: Sequence[Mode], unconditioned: bool | None = None
) -> list[str]:
    """Every column of ``criterion_ids`` in ``modes``: prompt columns, then likelihood columns,
    then :data:`UNCONDITIONED` when ``unconditioned`` (None: with the likelihood mode)."""
    columns = [column(m, c) for m in ("prompt", "likelihood") if m in modes for c in criterion_ids]
    if with_unconditioned(modes, unconditioned):
        columns.append(UNCONDITIONED)
    return columns


def with_unconditioned(modes: Sequence[Mode], unconditioned: bool | None) -> bool:
    """Whether :data:`UNCONDITIONED` is scored: as ``unconditioned`` says, or, when it is None,
    with the likelihood mode. It can be scored without that mode, once mode pruning has dropped
    the criterion-conditioned likelihoods but kept the text's own."""
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
