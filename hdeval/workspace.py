"""The pipeline's working tree (paths of every stage's outs) and what stage scripts share."""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from hdeval.errors import ConfigError, HDEvalError
from hdeval.paths import sha256_file

#: The params file the stage scripts read: ``params.yaml``, or the file ``hdeval train --params``
#: names through this variable (``dvc repro`` always reads ``params.yaml``).
PARAMS_ENV = "HDEVAL_PARAMS"
PARAMS = Path(os.environ.get(PARAMS_ENV) or "params.yaml")
WORK = Path("work")
LABELS = WORK / "labels.json"
PEER = WORK / "peer.json"
PREPARED = WORK / "prepared"
#: Every row of the run: the development share the tree is grown on (train.jsonl) and the
#: documents it never saw (test.jsonl); every one of them is cross-fitted.
ROWS = PREPARED / "rows.jsonl"
LAYERS = WORK / "layers"
TUNE = WORK / "tune"
EVALUATE = WORK / "evaluate"
EXPLAIN = WORK / "explain"
BASELINES = WORK / "baselines"
DHP = WORK / "dhp"
ACCEPTANCE = WORK / "acceptance.json"
AGGREGATOR = TUNE / "aggregator.joblib"
BUNDLE = Path("models") / "evaluator"
METRICS = Path("metrics.json")
HEADLINE = Path("headline.json")
RESULTS = Path("results.md")
PLOTS = Path("plots")


def fresh(directory: Path) -> Path:
    """``directory``, emptied: a stage rewrites its outs completely."""
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    return directory


def write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


def label_manifest(paths: list[Path]) -> dict:
    """The sha256 of every label file, in the order params list them."""
    missing = [str(p) for p in paths if not Path(p).is_file()]
    if missing:
        raise ConfigError(
            f"label file not found: {', '.join(missing)} (params data.path / data.new_labels)"
        )
    return {"files": [{"path": str(p), "sha256": sha256_file(p)} for p in paths]}


def layer_dir(number: int) -> Path:
    return LAYERS / str(number)


def read_features(path: Path):
    """A feature table written by a stage, indexed by sample id (always a string)."""
    import pandas as pd

    features = pd.read_csv(path, index_col=0)
    features.index = features.index.astype(str)
    return features


def run_stage(name: str, main: Callable[..., None], *args: object) -> None:
    """Run a stage script: its progress bar and result lines; warnings and errors of the
    library (``HDEVAL_LOG=INFO`` shows its progress messages too); an hdeval error reported in
    one line with exit 1, an interrupt (Ctrl-C) in one line with exit 130 (the answers computed
    so far are in the result cache)."""
    if os.environ.get(PARAMS_ENV) and os.environ.get("DVC_STAGE"):
        print(
            f"stage {name} refused: {PARAMS_ENV} is set, but dvc repro tracks params.yaml only; "
            f"unset {PARAMS_ENV} or use hdeval train --params",
            file=sys.stderr,
        )
        sys.exit(1)
    level = os.environ.get("HDEVAL_LOG", "WARNING").upper()
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    try:
        main(*args)
    except HDEvalError as exc:
        print(f"stage {name} failed: {exc}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:  # on a line of its own: a progress bar may have been cut off
        print(
            f"\nstage {name} interrupted; every LLM answer it computed is kept in the result "
            "cache, and `dvc repro` goes on from them",
            file=sys.stderr,
        )
        sys.exit(130)
