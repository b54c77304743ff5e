"""HD-Eval end to end on the real embedded judge, tiny: grow, score, prune, train, export."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from hdeval.errors import ModelIntegrityError
from hdeval.export.bundle import export_evaluator, split_precision
from hdeval.export.evaluator import Evaluator
from hdeval.llm.cache import ResultCache
from hdeval.llm.judge import CachedJudge
from hdeval.params import (
    AggregatorParams,
    DataParams,
    EvaluateParams,
    HierarchyParams,
    Params,
)
from hdeval.training.fit import select_and_fit
from hdeval.training.hierarchy import train_hierarchy
from hdeval.tree.criteria import CriteriaTree, Criterion
from tests.dvc_project import summeval_rows

REPO = Path(__file__).resolve().parents[1]

ASPECTS = ["coherence", "fluency"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """4 documents (each article's first 120 words) x 5 systems of SummEval and a 2-aspect
    layer-1 tree."""
    root = tmp_path_factory.mktemp("tiny")
    rows = summeval_rows(64, {"M0", "M1", "M2", "M5", "M8"}, source_words=120)
    labels = root / "labels.jsonl"
    labels.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tree = CriteriaTree(
        [
            Criterion("coherence", "coherence", "the summary is well-structured and organized"),
            Criterion("fluency", "fluency", "the sentences are grammatical and easy to read"),
        ]
    )
    tree.to_yaml(root / "aspects.yaml")
    return root, labels, len(rows)


def _train(params: Params, judge: CachedJudge, bundle: Path, work: Path) -> list[dict]:
    """Algorithm 1, model selection and export, as the layer and train stages run them; returns
    the layers' reports."""
    from hdeval.data.splitting import load_split
    from hdeval.tree.criteria import aspects_tree

    train, _ = load_split(params.data)
    layers = train_hierarchy(
        aspects_tree(params.data), train, judge, params.task, params.hierarchy, False
    )
    selected = select_and_fit(params, layers[-1].tree, layers[-1].run.features, train, work)
    export_evaluator(bundle, selected, train, params, judge.identity)
    return [layer.report.to_dict() for layer in layers]


def _config(root, labels, kind: str) -> Params:
    return Params(
        data=DataParams(
            path=labels,
            aspects=ASPECTS,
            criteria=root / "aspects.yaml",
            n_docs=None,
            test_fraction=0.25,
            seed=0,
        ),
        hierarchy=HierarchyParams(
            layers=2,
            children=2,
            top_k=1,
            modes=["prompt"],
            cv_folds=2,
            importance_repeats=2,
            min_mode_gain=None,  # the tree grows whatever the prompt scores add
        ),
        aggregator=AggregatorParams(  # every kind ships here, whatever the rising check says
            kinds=[kind], feature_layers=[2], n_trials=2, cv_folds=2, max_rising_share=None
        ),
        evaluate=EvaluateParams(bootstrap=10),
    )


@pytest.mark.model
def test_train_every_aggregator_export_and_score_through_onnx(tiny, embedded_backend, tmp_path):
    root, labels, _ = tiny
    cache = ResultCache(root / "cache.sqlite")
    judge = CachedJudge(embedded_backend, cache)
    decompositions = []
    for kind in ("linear", "tree", "forest", "mlp"):
        bundle = tmp_path / kind
        layers = _train(_config(root, labels, kind), judge, bundle, tmp_path / "work")
        assert [r["layer"] for r in layers] == [1, 2]
        assert len(layers[1]["criteria"]) >= 2  # layer 2 grew from the LLM's decomposition
        card = json.loads((bundle / "card.json").read_text())
        identity, precision = split_precision(embedded_backend.identity)
        assert (card["llm_identity"], card["llm_precision"]) == (identity, precision)
        assert precision in ("float32", "bfloat16") and precision not in identity
        assert len(card["feature_names"]) == len(CriteriaTree.from_yaml(bundle / "criteria.yaml"))

        evaluator = Evaluator.load(bundle, judge)
        result = evaluator.score(
            "The cat sat on the mat all day. It did not move.", "A cat sat on a mat."
        )
        assert set(result["aspects"]) == set(ASPECTS)
        assert all(v is not None and math.isfinite(v) for v in result["aspects"].values()), result
        assert set(result["criteria"]) == set(card["feature_names"])
        decompositions.append(cache.info()["results"]["decompose"])

    tree = CriteriaTree.from_yaml(tmp_path / "linear" / "criteria.yaml")
    assert tree.depth == 2 and all(c.decomposed for c in tree.layer(1))
    # each aspect decomposed once (a reply that did not parse is retried, and cached too),
    # then reused from the cache by the other three kinds
    assert decompositions[0] >= len(ASPECTS) and len(set(decompositions)) == 1, decompositions


@pytest.mark.model
def test_bundle_refuses_mismatched_criteria_and_judge(tiny, embedded_backend, tmp_path):
    root, labels, _ = tiny
    cache = ResultCache(root / "cache.sqlite")
    judge = CachedJudge(embedded_backend, cache)
    bundle = tmp_path / "b"
    _train(_config(root, labels, "linear"), judge, bundle, tmp_path)

    class OtherBackend:
        identity = "openai-compatible:some-other-model"

    with pytest.raises(ModelIntegrityError, match="trained with judge"):
        Evaluator.load(bundle, CachedJudge(OtherBackend(), cache))

    text = (bundle / "criteria.yaml").read_text()
    edited = text.replace("well-structured and organized", "well-structured", 1)
    assert edited != text
    (bundle / "criteria.yaml").write_text(edited)
    with pytest.raises(ModelIntegrityError, match="criteria hash"):
        Evaluator.load(bundle, judge)


@pytest.mark.model
def test_cli_score_writes_jsonl_rows(tiny, embedded_backend, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from hdeval.cli import app

    root, labels, _ = tiny
    monkeypatch.setenv("HDEVAL_CACHE", str(root / "cache.sqlite"))
    bundle = tmp_path / "b"
    judge = CachedJudge(embedded_backend, ResultCache(root / "cache.sqlite"))
    _train(_config(root, labels, "linear"), judge, bundle, tmp_path)
    inputs = tmp_path / "in.jsonl"
    inputs.write_text("".join(labels.read_text().splitlines(keepends=True)[:2]))
    out = tmp_path / "out.jsonl"
    monkeypatch.chdir(tmp_path)  # no params.yaml here: the embedded judge is the default
    result = CliRunner().invoke(
        app, ["score", str(inputs), "--model", str(bundle), "--out", str(out), "--explain"]
    )
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 2
    for row in rows:
        assert set(row["scores"]) == set(ASPECTS)
        assert all(isinstance(v, float) for v in row["scores"].values())
        assert len(row["criteria"]) >= 4 and row["failures"] == [] and row["truncated"] is False
        for aspect, explained in row["explanation"]["aspects"].items():
            total = explained["base"] + sum(explained["contributions"].values())
            assert total == pytest.approx(row["scores"][aspect], abs=1e-6)


def test_production_path_imports_no_training_libraries():
    code = (
        "import sys, hdeval.export.evaluator, hdeval.explain.runtime, hdeval.cli;"
        "bad = [m for m in ('sklearn', 'optuna', 'skl2onnx', 'shap') if m in sys.modules];"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


@pytest.mark.parametrize("module", ["hdeval.export.evaluator", "hdeval.explain.runtime"])
def test_production_scoring_imports_no_pandas(module):
    """Scoring with a bundle and explaining its scores need numpy and onnxruntime only."""
    code = f"import sys, {module}; assert 'pandas' not in sys.modules, 'pandas imported'"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr


def test_the_public_api_loads_lazily():
    """``from hdeval import Evaluator, open_judge, LLMConfig`` (the README's example) works,
    and neither it nor ``import hdeval`` pulls in torch, scikit-learn or pandas."""
    code = (
        "import sys, hdeval; heavy = ('torch', 'sklearn', 'pandas', 'optuna');"
        "assert not [m for m in heavy if m in sys.modules];"
        "from hdeval import Evaluator, LLMConfig, open_judge; import hdeval.export.evaluator;"
        "assert Evaluator is hdeval.export.evaluator.Evaluator;"
        "assert LLMConfig().backend == 'embedded';"
        "assert callable(open_judge) and not [m for m in heavy if m in sys.modules]"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr
