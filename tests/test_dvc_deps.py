"""dvc.yaml is what the stage objects declare (data deps, outs, params keys, the layer list),
every stage depends on its script and the code it imports, the stages run in an order that works;
params.yaml = code defaults."""

from __future__ import annotations

from pathlib import Path

import yaml

from hdeval.params import Params, load_params
from hdeval.pipeline.registry import STAGES
from hdeval.pipeline.runner import stage_commands
from hdeval.pipeline.stages.base import Out, Stage
from hdeval.pipeline.stages.layer import HIERARCHY
from tests.code_deps import REPO, code_closure, code_units


def _stages() -> dict:
    return yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]


def _script(stage: Stage) -> Path:
    return REPO / stage.script


def _declared_outs(outs: list) -> dict[str, Out]:
    found = {}
    for out in outs:
        path, options = next(iter(out.items())) if isinstance(out, dict) else (out, {})
        found[path] = Out(path, options.get("cache", True), options.get("persist", False))
    return found


def test_dvc_yaml_is_what_the_stage_objects_declare() -> None:
    layers = load_params(REPO / "params.yaml").hierarchy.layers
    written = _stages()
    assert list(written) == [stage.name for stage in STAGES]
    for stage in STAGES:
        entry = written[stage.name]
        if stage.per_layer:
            keys = [str(n) for n in range(1, layers + 1)]
            assert list(entry["foreach"]) == keys, "the layer list follows hierarchy.layers"
            previous = ["${data.criteria}", *(f"work/layers/{n}" for n in keys[:-1])]
            assert [entry["foreach"][k]["prev"] for k in keys] == previous
            entry = entry["do"]
        args = " ${key}" if stage.per_layer else ""
        assert entry["cmd"] == f"python {stage.script}{args}", stage.name
        data = [d for d in entry["deps"] if not d.startswith(("hdeval/", "pipelines/"))]
        assert data == stage.inputs(layers), stage.name
        assert entry.get("params", []) == list(stage.params), stage.name
        assert _declared_outs(entry.get("outs", [])) == {o.path: o for o in stage.outs}
        assert _declared_outs(entry.get("metrics", [])) == {o.path: o for o in stage.metrics}
        assert entry.get("always_changed", False) == stage.always_changed, stage.name


def test_every_stage_depends_on_its_script_and_the_code_it_imports() -> None:
    for stage in STAGES:
        entry = _stages()[stage.name]
        deps = entry.get("do", entry)["deps"]
        code = {d for d in deps if d.startswith(("hdeval/", "pipelines/"))}
        assert code == {stage.script, *code_units(code_closure(_script(stage)))}, stage.name


def test_only_model_selection_reads_the_family_gain() -> None:
    """Changing ``hierarchy.min_family_gain`` re-runs evaluate and train, not the layers."""
    assert "hierarchy.min_family_gain" not in HIERARCHY
    assert {f"hierarchy.{k}" for k in Params.model_fields["hierarchy"].annotation.model_fields} == {
        *HIERARCHY,
        "hierarchy.min_family_gain",
    }
    reads = {s.name for s in STAGES if {"hierarchy", "hierarchy.min_family_gain"} & set(s.params)}
    assert reads == {"evaluate", "train"}


def test_code_deps_are_subpackages_and_top_level_modules() -> None:
    units = code_units(
        {
            "hdeval/__init__.py",
            "hdeval/errors.py",
            "hdeval/llm/local/backend.py",
            "hdeval/pipeline/stages/dhp.py",
        }
    )
    assert units == {
        "hdeval/__init__.py",
        "hdeval/errors.py",
        "hdeval/llm",
        "hdeval/pipeline/stages/dhp.py",
    }


def test_closure_follows_lazy_imports_and_packages() -> None:
    stages = REPO / "hdeval" / "pipeline" / "stages"
    dhp = code_closure(stages / "dhp.py")
    assert {"hdeval/dhp/__init__.py", "hdeval/dhp/rules.py", "hdeval/scoring/prompts.py"} <= dhp
    assert "hdeval/scoring/prompts.py" not in code_closure(stages / "prepare.py")
    # the estimate's types, imported for type checking only, are no code a stage runs
    assert "hdeval/pipeline/scenario.py" not in code_closure(stages / "layer.py")


def _outs(stage: dict) -> set[str]:
    return {next(iter(o)) if isinstance(o, dict) else o for o in stage.get("outs", [])}


def test_stages_are_listed_in_an_order_that_runs() -> None:
    """What ``hdeval train`` relies on: a stage reading another's outs comes after it."""
    seen: set[str] = set()
    for name, stage in _stages().items():
        keys = list(stage["foreach"]) if "foreach" in stage else [None]
        body = stage.get("do", stage)
        for key in keys:
            expand = (lambda s, k=key: s.replace("${key}", str(k))) if key else (lambda s: s)
            deps = {expand(d) for d in body["deps"]}
            if key is not None:
                deps.add(str(stage["foreach"][key]["prev"]))
            produced_by_others = {
                d for d in deps if any(Path(d).is_relative_to(o) for o in _all_outs() - seen)
            }
            assert not produced_by_others, f"{name}@{key} reads {produced_by_others} before"
            seen |= {expand(o) for o in _outs(body)}


def _all_outs() -> set[str]:
    outs: set[str] = set()
    for stage in _stages().values():
        keys = list(stage["foreach"]) if "foreach" in stage else [None]
        for key in keys:
            outs |= {o.replace("${key}", str(key)) for o in _outs(stage.get("do", stage))}
    return outs


def test_hdeval_train_runs_the_stages_of_dvc_yaml_in_its_order() -> None:
    names = [stage.name for stage in stage_commands(REPO)]
    assert names[:5] == ["labels", "prepare", "layer@1", "layer@2", "layer@3"]
    assert names[-1] == "report" and len(names) == len(_stages()) + 2


def test_params_yaml_equals_the_code_defaults() -> None:
    """But for ``data.documents``: params.yaml reads SummEval's development documents only,
    where the code's default (null: every document) suits a label file of one's own."""
    written = yaml.safe_load((REPO / "params.yaml").read_text())
    assert written["data"].pop("documents") == "data/summeval/development_documents.txt"
    assert Params.model_validate(written) == Params()
    assert set(written) == set(Params.model_fields)


def test_every_preset_holds_every_params_key_a_stage_declares() -> None:
    """DVC refuses a stage whose declared params key is missing from the params file, so each
    preset must hold every key the stages declare (a section name: the section)."""
    for preset in sorted((REPO / "params").glob("*.yaml")):
        written = yaml.safe_load(preset.read_text())
        for stage in STAGES:
            for key in stage.params:
                node = written
                for part in key.split("."):
                    assert isinstance(node, dict) and part in node, (preset.name, stage.name, key)
                    node = node[part]
