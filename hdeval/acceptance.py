"""The gates a trained bundle must pass before it ships: DHP discernment and same-judge baselines.

Each gate gives a :class:`Verdict`; :func:`enforce` turns refusals into an
:class:`~hdeval.errors.AcceptanceError` (``on_failure: fail``) or logged warnings (``warn``). The
baseline gate refuses a bundle whose held-out agreement is below the best same-judge baseline
(direct prompt per aspect, per-aspect likelihood, unconditioned likelihood) by more than a margin.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import pandas as pd

from hdeval.errors import AcceptanceError
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


def baseline_verdict(
    table: pd.DataFrame, settings: AcceptanceParams, scorer: str = "hdeval"
) -> Verdict:
    """Compare ``scorer`` with the best of ``settings.baselines`` in a comparison table.

    ``table`` is :func:`hdeval.baselines.compare`'s (columns scorer, aspect, level, correlation,
    value, ci_low, ci_high); the aspect average at ``settings.level`` / ``correlation`` is
    compared. Baselines absent from the table (a server without likelihoods) are named in the
    message; with none present the gate cannot refuse and says so.
    """
    rows = table[
        (table["aspect"] == "average")
        & (table["level"] == settings.level)
        & (table["correlation"] == settings.correlation)
    ]
    what = f"held-out {settings.level} {settings.correlation}"
    own = _figure(rows, scorer)
    present = {b: f for b in settings.baselines if (f := _figure(rows, b)) is not None}
    missing = [b for b in settings.baselines if b not in present]
    note = f"; not in the table: {', '.join(missing)}" if missing else ""
    if own is None:
        return Verdict("baselines", False, f"baselines refused {scorer}: it has no {what}{note}")
    if not present:
        message = f"baselines not checked for {scorer} ({what} {own}): no baseline{note}"
        return Verdict("baselines", True, message, {scorer: asdict(own)})
    name = max(present, key=lambda b: present[b].value)
    best = present[name]
    accepted = own.value >= best.value - settings.baseline_margin
    comparison = ">=" if own.value >= best.value else "<"
    message = (
        f"baselines {'accepted' if accepted else 'refused'} {scorer}: {what} {own} {comparison} "
        f"{best} of the best same-judge baseline {name!r} (margin {settings.baseline_margin})"
        f"{note}"
    )
    figures = {scorer: asdict(own), name: asdict(best), "margin": settings.baseline_margin}
    return Verdict("baselines", accepted, message, figures)


def dhp_verdict(
    scorer: str, d_min_ew: float, table: pd.DataFrame, settings: AcceptanceParams
) -> Verdict:
    """Refuse when D_min^EW is below ``dhp_threshold`` or a perturbation was not discerned.

    ``table`` is the scorer's DHP table (one row per perturbation: ``probe``, ``D_ew``,
    ``D_reward_ew``): a DHP perturbation with ``D_ew`` below the threshold, or a probe that
    raised the scores (``D_reward_ew >= 1``), is not discerned.
    """
    threshold = settings.dhp_threshold
    probes = table["probe"].astype(bool)
    failed = table[~probes & (table["D_ew"] < threshold)].index.tolist()
    failed += table[probes & (table["D_reward_ew"] >= 1.0)].index.tolist()
    value = float("nan") if d_min_ew is None else float(d_min_ew)
    figures = {"D_min_ew": None if math.isnan(value) else value, "threshold": threshold}
    if value >= threshold and not failed:
        return Verdict("dhp", True, f"DHP accepted {scorer}: D_min^EW {value:.3f} >= {threshold}")
    message = (
        f"DHP refused {scorer}: D_min^EW {value:.3f} < threshold {threshold}; not discerned: "
        f"{', '.join(map(str, failed)) or 'none'}"
    )
    return Verdict("dhp", False, message, {**figures, "failed": [str(f) for f in failed]})


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
