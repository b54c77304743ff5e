"""The evaluator bundle: what production scoring loads.

A bundle directory holds ``aggregator.onnx``, ``criteria.yaml`` and ``card.json`` (judge identity
and precision, prompt template version, task wording, scoring modes, feature order, aspects,
criteria hash, training-data hash, metrics, aggregator file hash, each aspect's human score range,
and, where trained with them, each aspect's prediction-interval widths).
The card carries the sha256 of its own content (``card_sha256``): an edited card (a renamed or
swapped aspect, other task wording, a deleted key) is refused when read, since it would change the
prompts or the labels of the scores without changing the aggregator. It is written to a temporary
directory and swapped into place in one step (:func:`hdeval.atomic_dir.staged_dir`), so a reader, or
an export killed at any moment, leaves the previous complete bundle or the new one, never half of
one.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from hdeval.atomic_dir import staged_dir
from hdeval.errors import ModelIntegrityError
from hdeval.export.intervals import Intervals
from hdeval.params import Mode, TaskSpec
from hdeval.paths import sha256_file
from hdeval.scoring.columns import Profile, describe, orientation
from hdeval.scoring.prompts import TEMPLATE_VERSION
from hdeval.tree.criteria import CriteriaTree

if TYPE_CHECKING:
    from hdeval.data import LabelledData
    from hdeval.params import Params
    from hdeval.training.fit import Selected

AGGREGATOR = "aggregator.onnx"
CRITERIA = "criteria.yaml"
CARD = "card.json"
CARD_VERSION = 3
#: How a card names a column's orientation (:func:`hdeval.scoring.columns.orientation`).
ORIENTATIONS = {1: "higher is better", -1: "lower is better", 0: "not a quality judgement"}


PRECISIONS = ("bfloat16", "float16", "float32")
INT8_KINDS = ("", "int8", "int8_fbgemm")  # what may follow the dtype: llm.quantize's kinds


def split_precision(identity: str) -> tuple[str, str | None]:
    """(a judge identity without its precision, the precision or None).

    A local judge's identity ends in the dtype its weights run in
    (``transformers:<name>:<weights hash>:float32``, or ``float32-int8`` with ``llm.quantize``):
    part of every cache key, since scores move slightly with it, but not of what a bundle must
    match (see ``llm.strict_precision``). A server judge's identity names no precision.
    """
    head, _, last = identity.rpartition(":")
    dtype, _, quantized = last.partition("-")  # float32-int8(_fbgemm): llm.quantize on fp32
    if identity.startswith("transformers:") and dtype in PRECISIONS and quantized in INT8_KINDS:
        return head, last
    return identity, None


class ColumnNote(BaseModel):
    """What one feature column measures, and which way is better (``orientation``)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    meaning: str
    orientation: Literal["higher is better", "lower is better", "not a quality judgement"]


class Card(BaseModel):
    """The fields of ``card.json`` and their types (all required but ``intervals`` and the
    later additions with defaults, no others)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    card_version: Literal[3]
    llm_identity: str
    llm_precision: str | None
    template_version: str
    task: TaskSpec
    modes: list[Mode] = Field(min_length=1)
    unconditioned: bool
    likelihood_stats: list[str] = Field(min_length=1)
    source_free: bool
    length: bool
    families: list[str] = Field(default_factory=list)  # "references": rows need references
    end_of_text: bool = False  # likelihoods read the text with the judge's end-of-reply marker
    feature_names: list[str] = Field(min_length=1)
    columns: dict[str, ColumnNote]
    aspects: list[str] = Field(min_length=1)
    score_ranges: dict[str, list[float]]
    criteria_sha256: str
    training_data_sha256: str
    aggregator: str
    aggregator_sha256: str
    background_sha256: str | None
    metrics: dict
    intervals: Intervals | None = None  # absent: a bundle trained without prediction intervals
    card_sha256: str

    @model_validator(mode="after")
    def _intervals_of_every_aspect(self) -> Card:
        if self.intervals is not None and sorted(self.intervals.aspects) != sorted(self.aspects):
            raise ValueError(
                f"intervals are given for {sorted(self.intervals.aspects)}, the aspects are "
                f"{sorted(self.aspects)}"
            )
        return self


def card_sha256(card: dict) -> str:
    """sha256 of every field of ``card`` except ``card_sha256`` (canonical JSON)."""
    body = {k: v for k, v in card.items() if k != "card_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


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
    profile: Profile = Profile(),
    metrics: dict | None = None,
    sample=None,
    background=None,
    score_ranges: dict[str, tuple[float, float]] | None = None,
    intervals: dict | None = None,
) -> Path:
    """Write a bundle atomically; the ONNX parity check runs before anything is renamed.

    ``llm_identity`` is the judge's full identity; its precision (a local judge's dtype) is
    stored apart, as ``llm_precision``. ``profile`` says how likelihoods became columns; the
    card also states, per column, what it measures and which way is better (a column that is
    not a quality judgement, such as length, is exempt from the non-negative weights and the
    "rises when worse" check, and says so). ``intervals``
    (:func:`hdeval.export.intervals.fit_intervals`) gives every score a prediction interval.
    """
    from hdeval.export.onnx_export import export_onnx

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
            "llm_identity": split_precision(llm_identity)[0],
            "llm_precision": split_precision(llm_identity)[1],
            "template_version": TEMPLATE_VERSION,
            "task": task.model_dump(),
            "modes": list(modes),
            "unconditioned": unconditioned,
            "likelihood_stats": list(profile.stats),
            "source_free": profile.source_free,
            "length": profile.length,
            "families": list(profile.families),
            "end_of_text": profile.end_of_text,
            "feature_names": list(feature_names),
            "columns": {
                name: {"meaning": describe(name), "orientation": ORIENTATIONS[orientation(name)]}
                for name in feature_names
            },
            "aspects": list(aspects),
            "score_ranges": {a: list(r) for a, r in (score_ranges or {}).items()},
            "criteria_sha256": tree.fingerprint(),
            "training_data_sha256": training_data,
            "aggregator": type(pipeline[-1]).__name__ if hasattr(pipeline, "__getitem__") else "",
            "aggregator_sha256": sha256_file(tmp / AGGREGATOR),
            "background_sha256": background_sha256,
            "metrics": metrics or {},
        }
        if intervals is not None:
            card["intervals"] = intervals
        card["card_sha256"] = card_sha256(card)
        (tmp / CARD).write_text(json.dumps(card, indent=2))
    return path


def read_card(path: str | Path) -> dict:
    """The card of the bundle at ``path``, refused unless it is exactly as exported."""
    card_path = Path(path) / CARD
    if not card_path.is_file():
        raise ModelIntegrityError(f"{path} is not an hdeval bundle: {CARD} is missing")
    try:
        card = json.loads(card_path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, bad UTF-8, absurd nesting
        raise ModelIntegrityError(f"{card_path} is not valid JSON: {exc}") from exc
    if not isinstance(card, dict):
        raise ModelIntegrityError(f"{card_path} is not a bundle card (not a JSON object)")
    if card.get("card_version") != CARD_VERSION:
        raise ModelIntegrityError(
            f"{card_path}: card version {card.get('card_version')!r}, expected {CARD_VERSION}; "
            "retrain the evaluator with this hdeval"
        )
    if "card_sha256" not in card:
        raise ModelIntegrityError(f"{card_path} has no integrity hash (card_sha256)")
    if card_sha256(card) != card["card_sha256"]:
        raise ModelIntegrityError(
            f"{card_path} was edited after export (its content no longer matches card_sha256): "
            "the card decides the prompts, the judge and the names of the scores, so an edit "
            "would mislabel them; retrain instead of editing a bundle"
        )
    try:
        Card.model_validate(card)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'card'}: {e['msg']}" for e in exc.errors()
        )
        raise ModelIntegrityError(f"{card_path} is not a valid bundle card: {problems}") from exc
    return card


def export_evaluator(
    out_dir: Path,
    selected: Selected,
    train: LabelledData,
    params: Params,
    llm_identity: str,
    intervals: dict | None = None,
) -> Path:
    """Write the bundle of the selected aggregator: its feature set's criteria and modes, a
    parity sample, the SHAP background, the selection (with the CV table) and the prediction
    ``intervals`` (None: none) in the card."""
    from hdeval.explain.runtime import make_background

    features = selected.features
    return export_bundle(
        out_dir,
        selected.model,
        selected.tree,
        list(features.columns),
        train.aspects,
        llm_identity=llm_identity,
        task=params.task,
        modes=list(selected.feature_set.modes),
        unconditioned=selected.feature_set.unconditioned,
        profile=selected.feature_set.profile,
        training_data=train.fingerprint(),
        metrics={
            "selection": selected.summary(),
            "training_rows": len(train),
            "training_documents": int(train.samples["doc_id"].nunique()),
        },
        sample=features.to_numpy(dtype=float),
        background=make_background(features),
        score_ranges={a: params.data.ranges()[a] for a in train.aspects},
        intervals=intervals,
    )
