"""The evaluator bundle: what production scoring loads.

A bundle directory holds ``aggregator.onnx``, ``criteria.yaml`` and ``card.json`` (judge
identity, prompt template version, task wording, scoring modes, feature order, criteria hash,
training-data hash, metrics, aggregator file hash, each aspect's human score range). It is
written to a temporary directory and swapped into place in one step
(:func:`hdeval.atomic_dir.staged_dir`), so a reader, or an export killed at any moment, leaves
the previous complete bundle or the new one, never half of one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hdeval.atomic_dir import staged_dir
from hdeval.criteria import CriteriaTree
from hdeval.errors import ModelIntegrityError
from hdeval.params import TaskSpec
from hdeval.paths import sha256_file
from hdeval.prompts import TEMPLATE_VERSION

AGGREGATOR = "aggregator.onnx"
CRITERIA = "criteria.yaml"
CARD = "card.json"
CARD_VERSION = 1


def export_bundle(
    path: str | Path,
    pipeline: Any,
    tree: CriteriaTree,
    feature_names: list[str],
    aspects: list[str],
    *,
    llm_identity: str,
    task: TaskSpec,
    modes: list[str],
    unconditioned: bool,
    training_data: str,
    metrics: dict | None = None,
    sample=None,
    background=None,
    score_ranges: dict[str, tuple[float, float]] | None = None,
) -> Path:
    """Write a bundle atomically; the ONNX parity check runs before anything is renamed."""
    from hdeval.onnx_export import export_onnx

    path = Path(path)
    with staged_dir(path) as tmp:
        export_onnx(
            pipeline,
            len(feature_names),
            tmp / AGGREGATOR,
            sample,
            feature_names=feature_names,
            output_names=aspects,
        )
        tree.to_yaml(tmp / CRITERIA)
        background_sha256 = None
        if background is not None:
            from hdeval.explain.runtime import save_background

            background_sha256 = sha256_file(save_background(tmp, background))
        card = {
            "card_version": CARD_VERSION,
            "llm_identity": llm_identity,
            "template_version": TEMPLATE_VERSION,
            "task": task.model_dump(),
            "modes": list(modes),
            "unconditioned": unconditioned,
            "feature_names": list(feature_names),
            "aspects": list(aspects),
            "score_ranges": {a: list(r) for a, r in (score_ranges or {}).items()},
            "criteria_sha256": tree.fingerprint(),
            "training_data_sha256": training_data,
            "aggregator": type(pipeline[-1]).__name__ if hasattr(pipeline, "__getitem__") else "",
            "aggregator_sha256": sha256_file(tmp / AGGREGATOR),
            "background_sha256": background_sha256,
            "metrics": metrics or {},
        }
        (tmp / CARD).write_text(json.dumps(card, indent=2))
    return path


def read_card(path: str | Path) -> dict:
    card_path = Path(path) / CARD
    if not card_path.is_file():
        raise ModelIntegrityError(f"{path} is not an hdeval bundle: {CARD} is missing")
    try:
        card = json.loads(card_path.read_text())
    except json.JSONDecodeError as exc:
        raise ModelIntegrityError(f"{card_path} is not valid JSON: {exc}") from exc
    if card.get("card_version") != CARD_VERSION:
        raise ModelIntegrityError(
            f"{card_path}: card version {card.get('card_version')!r}, expected {CARD_VERSION}"
        )
    return card
