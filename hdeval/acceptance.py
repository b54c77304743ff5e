"""The gates a trained bundle must pass before it ships: DHP discernment and same-judge baselines.

Each gate gives a :class:`Verdict`; :func:`enforce` turns refusals into an
:class:`~hdeval.errors.AcceptanceError` (``on_failure: fail``) or logged warnings (``warn``). The
baseline gate refuses a bundle whose cross-fitted agreement is below the best same-judge baseline
(direct prompt per aspect, per-aspect likelihood, unconditioned likelihood) by more than a margin.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import pandas as pd

from hdeval.dhp.statistics import missed_and_rewarded
from hdeval.errors import AcceptanceError
from hdeval.metrics import paired_difference
from hdeval.params import AcceptanceParams

log = logging.getLogger(__name__)


@dataclass
class Verdict:
    """One gate's decision, its message and the figures it compared."""

    gate: str
    accepted: bool
    message: str
    figures: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Figure:
    """An aspect-averaged agreement with its 95 % CI."""

    value: float
    low: float
    high: float

    def __str__(self) -> str:
        if math.isnan(self.low):
            return f"{self.value:.3f}"
        return f"{self.value:.3f} [{self.low:.2f}, {self.high:.2f}]"


def _figure(rows: pd.DataFrame, scorer: str) -> Figure | None:
    row = rows[rows["scorer"] == scorer]
    if row.empty or math.isnan(float(row["value"].iloc[0])):
        return None
    return Figure(*(float(row[c].iloc[0]) for c in ("value", "ci_low", "ci_high")))


#: Scorers of the comparison table that need the label file's reference texts.
REFERENCE_BASED = ("rouge:rouge1", "rouge:rouge2", "rouge:rougeL")


def _gate_rows(table: pd.DataFrame, settings: AcceptanceParams) -> pd.DataFrame:
    return table[
        (table["aspect"] == "average")
        & (table["level"] == settings.level)
        & (table["correlation"] == settings.correlation)
    ]


def _best(rows: pd.DataFrame, names: Sequence[str]) -> str | None:
    """The name among ``names`` with the highest figure in ``rows``, or None if none has one."""
    present = {n: f for n in names if (f := _figure(rows, n)) is not None}
    return max(present, key=lambda n: present[n].value) if present else None


def compared_with(
    table: pd.DataFrame, settings: AcceptanceParams, peer: str | None = None
) -> list[str]:
    """The scorers the bundle's verdict is stated against: the best same-judge baseline of
    ``settings.baselines``, the best reference-based scorer and the published ``peer``, those
    the table has."""
    rows = _gate_rows(table, settings)
    named = (_best(rows, settings.baselines), _best(rows, REFERENCE_BASED), peer)
    return [n for n in named if n and _figure(rows, n) is not None]


def paired_differences(
    predictions: pd.DataFrame,
    samples: pd.DataFrame,
    human: pd.DataFrame,
    reference: str,
    against: Sequence[str],
    settings: AcceptanceParams,
    n_boot: int = 200,
    seed: int = 0,
) -> pd.DataFrame:
    """``reference``'s cross-fitted agreement (aspect average at ``settings.level`` /
    ``correlation``) minus that of each entry in ``against``, each on the rows both scored,
    with a paired document-bootstrap CI (:func:`~hdeval.metrics.paired_difference`).

    ``predictions`` holds every entry's predicted scores: rows indexed by sample id, a column
    ``entry`` (as the comparison table names it) and one column per aspect.
    """
    aspects = list(human.columns)
    frames = {e: f[aspects] for e, f in predictions.groupby("entry", sort=False)}
    systems = samples["system_id"] if "system_id" in samples.columns else None
    rows = []
    for entry in against:
        result = paired_difference(
            frames[reference], frames[entry], human, samples["doc_id"], systems,
            settings.level, settings.correlation, n_boot, seed,
        )  # fmt: skip
        rows.append({"against": entry, **result})
    return pd.DataFrame(rows, columns=["against", "difference", "ci_low", "ci_high", "n"])


def baseline_verdict(
    table: pd.DataFrame,
    settings: AcceptanceParams,
    scorer: str = "hdeval",
    paired: pd.DataFrame | None = None,
    peer: str | None = None,
) -> Verdict:
    """Compare ``scorer`` with the best of ``settings.baselines`` in a comparison table.

    ``table`` is :func:`hdeval.baselines.compare`'s (columns scorer, aspect, level, correlation,
    value, ci_low, ci_high); the aspect average at ``settings.level`` / ``correlation`` is
    compared. Baselines absent from the table (a server without likelihoods) are named in the
    message; with none present the gate cannot refuse and says so. ``paired`` (from
    :func:`paired_differences`, against :func:`compared_with`) adds the paired difference and
    its CI. Where the table has a reference-based scorer (ROUGE, when the labels have
    references), the message also states how ``scorer`` compares with the best of them: a user
    with references could pick it instead, although it does not decide the verdict.
    """
    rows = _gate_rows(table, settings)
    what = f"cross-fitted {settings.level} {settings.correlation}"
    own = _figure(rows, scorer)
    missing = [b for b in settings.baselines if _figure(rows, b) is None]
    note = f"; not in the table: {', '.join(missing)}" if missing else ""
    if own is None:
        return Verdict("baselines", False, f"baselines refused {scorer}: it has no {what}{note}")
    name = _best(rows, settings.baselines)
    reference = _best(rows, REFERENCE_BASED)
    figures: dict = {"level": settings.level, "correlation": settings.correlation}
    figures[scorer] = asdict(own)
    extra = ""
    if reference is not None:
        ref = _figure(rows, reference)
        figures[reference] = asdict(ref)
        side = "above" if own.value >= ref.value else "below"
        extra = (
            f"; {side} the best reference-based scorer {reference!r} ({ref}, needs reference "
            f"texts){_paired_note(paired, reference)}"
        )
    published = _figure(rows, peer) if peer else None
    if published is not None:
        figures[peer] = asdict(published)
        figures["peer"] = peer
        side = "above" if own.value >= published.value else "below"
        extra += f"; {side} the published peer {peer!r} ({published}{_paired_note(paired, peer)})"
    if name is None:
        message = f"baselines not checked for {scorer} ({what} {own}): no baseline{note}{extra}"
        return Verdict("baselines", True, message, figures)
    best = _figure(rows, name)
    accepted = own.value >= best.value - settings.baseline_margin
    comparison = ">=" if own.value >= best.value else "<"
    message = (
        f"baselines {'accepted' if accepted else 'refused'} {scorer}: {what} {own} {comparison} "
        f"{best} of the best same-judge baseline {name!r}{_paired_note(paired, name)} "
        f"(margin {settings.baseline_margin}){note}{extra}"
    )
    figures.update({name: asdict(best), "margin": settings.baseline_margin, "best": name})
    if paired is not None and len(paired):
        figures["paired"] = paired.to_dict(orient="records")
    return Verdict("baselines", accepted, message, figures)


def _paired_note(paired: pd.DataFrame | None, against: str) -> str:
    """ ", paired difference +0.061 [0.01, 0.11]" for ``against``, or nothing."""
    if paired is None:
        return ""
    row = paired[paired["against"] == against]
    if row.empty:
        return ""
    r = row.iloc[0]
    return f", paired difference {r['difference']:+.3f} [{r['ci_low']:.2f}, {r['ci_high']:.2f}]"


def dhp_verdict(
    scorer: str, d_min_ew: float, table: pd.DataFrame, settings: AcceptanceParams
) -> Verdict:
    """Refuse when D_min^EW is below ``dhp_threshold`` or a perturbation was not discerned.

    ``table`` is the scorer's DHP table (one row per perturbation: ``probe``, ``D_ew``,
    ``D_reward_ew``): a DHP perturbation with ``D_ew`` below the threshold, or a probe that
    raised the scores (``D_reward_ew >= 1``), is not discerned.
    """
    threshold = settings.dhp_threshold
    missed, rewarded = missed_and_rewarded(table, threshold)
    failed = missed + rewarded
    value = float("nan") if d_min_ew is None else float(d_min_ew)
    figures = {"D_min_ew": None if math.isnan(value) else value, "threshold": threshold}
    below = not value >= threshold
    if not below and not failed:
        return Verdict("dhp", True, f"DHP accepted {scorer}: D_min^EW {value:.3f} >= {threshold}")
    reasons = [f"D_min^EW {value:.3f} {'<' if below else '>='} threshold {threshold}"]
    if missed:
        reasons.append(f"not discerned: {', '.join(missed)}")
    if rewarded:
        reasons.append(f"scored higher (a probe it should not reward): {', '.join(rewarded)}")
    message = f"DHP refused {scorer}: {'; '.join(reasons)}"
    return Verdict("dhp", False, message, {**figures, "failed": failed})


def enforce(verdicts: Sequence[Verdict], on_failure: str) -> list[str]:
    """The verdicts' messages; refusals raise AcceptanceError (``fail``) or are logged."""
    refused = [v.message for v in verdicts if not v.accepted]
    if refused and on_failure == "fail":
        raise AcceptanceError(
            " | ".join(refused) + " (set acceptance.on_failure: warn to accept anyway)"
        )
    for message in refused:
        log.warning(message)
    return [("WARNING " if not v.accepted else "") + v.message for v in verdicts]
