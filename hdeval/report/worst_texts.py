"""The texts whose cross-fitted predictions were most wrong: human and predicted scores per
aspect, and the explanation of the shipped bundle's score of each (the explain stage's)."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from hdeval.report.record import RunRecord


def human_scores(held_out: pd.DataFrame, aspects: list[str]) -> pd.DataFrame:
    """The human score of every text per aspect (NaN where a rater gave none)."""
    rows = held_out["scores"].apply(lambda s: {a: (s or {}).get(a) for a in aspects})
    return pd.DataFrame(rows.tolist(), index=held_out.index, dtype=float)


def largest_errors(record: RunRecord, n: int = 10, top: int = 4) -> list[dict] | None:
    """The ``n`` texts whose cross-fitted predictions have the largest mean absolute error over
    the aspects, worst first; None where the run has no predictions."""
    if record.predictions is None or record.held_out is None:
        return None
    aspects = [a for a in record.aspects if a in record.predictions.columns]
    human = human_scores(record.held_out, aspects)
    predicted = record.predictions[aspects].reindex(human.index)
    error = (predicted - human).abs().mean(axis=1, skipna=True).dropna()
    worst = error.sort_values(ascending=False, kind="stable").head(n)
    names = {c.id: c.name for c in record.tree} if record.tree is not None else {}
    texts = []
    for sample_id, mean_error in worst.items():
        row = record.held_out.loc[sample_id]
        explanation = record.explanations.get(str(sample_id))
        texts.append(
            {
                "id": str(sample_id),
                "system": str(row.get("system_id", "") or ""),
                "error": f"{mean_error:.2f}",
                "output": str(row["output"]),
                "source": str(row["source"]),
                "aspects": [
                    {
                        "aspect": aspect,
                        "human": _score(human.at[sample_id, aspect]),
                        "predicted": _score(predicted.at[sample_id, aspect]),
                        "explanation": _explained(explanation, aspect, names, top),
                    }
                    for aspect in aspects
                ],
                "method": (explanation or {}).get("method", ""),
                "reference": (explanation or {}).get("reference", ""),
            }
        )
    return texts


def _score(value: float) -> str:
    return "n/a" if pd.isna(value) else f"{value:.2f}"


def _explained(
    explanation: Mapping | None, aspect: str, names: Mapping[str, str], top: int
) -> dict | None:
    """Base, the ``top`` largest contributions (criteria named as the tree names them) and the
    rest summed; None where the text has no explanation."""
    part = ((explanation or {}).get("aspects") or {}).get(aspect)
    if not part:
        return None
    ranked = sorted(part["contributions"].items(), key=lambda kv: -abs(kv[1]))
    shown = [
        {"what": names.get(k, k), "value": f"{v:+.2f}", "sign": "up" if v >= 0 else "down"}
        for k, v in ranked[:top]
    ]
    rest = sum(v for _, v in ranked[top:])
    return {
        "base": f"{part['base']:.2f}",
        "prediction": f"{part['prediction']:.2f}",
        "shown": shown,
        "rest": f"{rest:+.2f}" if len(ranked) > top else "",
        "others": len(ranked) - top,
    }
