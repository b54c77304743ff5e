"""A separate decomposer: a llama.cpp server on 127.0.0.1 writes the criteria while the embedded
judge scores every text (two real, different backends behind one cache)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hdeval.data import load_labels
from hdeval.llm.cache import ResultCache
from hdeval.llm.judge import CachedJudge, open_judge
from hdeval.params import HierarchyParams, LLMConfig, TaskSpec
from hdeval.training.hierarchy import run_layer
from hdeval.tree.criteria import CriteriaTree, Criterion
from tests.servers import MODEL_ALIAS

pytestmark = [pytest.mark.server, pytest.mark.model]
REPO = Path(__file__).resolve().parents[1]


def test_decomposer_writes_the_tree_and_the_judge_scores(llama_server, embedded_backend, tmp_path):
    with open(REPO / "data" / "summeval" / "summeval.jsonl", encoding="utf-8") as handle:
        rows = [json.loads(next(handle)) for _ in range(32)]
    rows = [r for r in rows if r["system_id"] in {"M0", "M1", "M8"}]  # 2 documents x 3
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps(r) + "\n" for r in rows))
    train = load_labels(labels, ["coherence"], (1.0, 5.0))
    tree = CriteriaTree([Criterion("coherence", "coherence", "the summary is well-structured")])
    cache = ResultCache(tmp_path / "cache.sqlite")
    judge = CachedJudge(embedded_backend, cache)
    config = LLMConfig(
        backend="openai", base_url=llama_server, model=MODEL_ALIAS, timeout=600.0,
        api_key_env="HDEVAL_TEST_UNSET_KEY", max_retries=1,
    )  # fmt: skip
    decomposer = open_judge(config, cache)
    params = HierarchyParams(layers=2, children=2, modes=["prompt"], cv_folds=2)

    generated, read = judge.tokens.completion, judge.tokens.prompt  # the backend is shared

    layer = run_layer(2, tree, [], train, judge, TaskSpec(), params, False, decomposer)

    assert decomposer.identity != judge.identity
    assert decomposer.tokens.completion > 0  # the server wrote the criteria ...
    assert judge.tokens.completion == generated  # ... the embedded judge generated nothing
    assert judge.tokens.prompt > read and decomposer.tokens.prompt > 0
    children = layer.tree.layer(2)
    assert children and all(c.parent == "coherence" for c in children)
    assert {f"prompt:{c.id}" for c in children} <= set(layer.run.features.columns)
    assert layer.run.features.notna().all().all()


@pytest.mark.model
@pytest.mark.parametrize("kind", ["int8", "int8_fbgemm"])
def test_an_int8_judge_leaves_the_criteria_to_its_unquantized_weights(embedded_dir, kind):
    from hdeval.llm.judge import open_decomposer
    from hdeval.llm.local.precision import resolve_dtype
    from hdeval.params import LLMConfig

    config = LLMConfig(quantize=kind)
    judge = open_judge(config)
    decomposer = open_decomposer(None, config, judge)
    assert judge.identity.endswith(f":float32-{kind}")
    assert decomposer is not None and decomposer.cache is judge.cache
    # unquantized: the judge's weights in the dtype ``auto`` picks on this CPU (bf16 or fp32)
    unquantized = str(resolve_dtype("auto")).removeprefix("torch.")
    assert decomposer.identity == judge.identity.replace(f":float32-{kind}", f":{unquantized}")
    assert open_decomposer(None, LLMConfig(quantize="none"), decomposer) is None
