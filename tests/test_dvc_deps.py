"""dvc.yaml declares every dependency a stage reads, code included, and lists its stages in an
order that runs; params.yaml = code defaults."""

from __future__ import annotations

from pathlib import Path

import yaml

from hdeval.params import Params
from hdeval.pipeline.stages import stage_commands
from tests.code_deps import REPO, code_closure, code_units


def _stages() -> dict:
    return yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]


def _script(stage: dict) -> str:
    return stage["cmd"].split()[1]


def test_every_stage_depends_on_its_script_and_the_subpackages_it_imports() -> None:
    for name, stage in _stages().items():
        stage = stage.get("do", stage)
        script = _script(stage)
        code = {d for d in stage["deps"] if d.startswith("hdeval/")}
        assert script in stage["deps"], name
        assert code == code_units(code_closure(REPO / script)), name


def test_code_deps_are_subpackages_and_top_level_modules() -> None:
    units = code_units({"hdeval/__init__.py", "hdeval/errors.py", "hdeval/llm/local.py"})
    assert units == {"hdeval/__init__.py", "hdeval/errors.py", "hdeval/llm"}


def test_closure_follows_lazy_imports_and_packages() -> None:
    dhp = code_closure(REPO / "pipelines" / "dhp.py")
    assert {"hdeval/dhp/__init__.py", "hdeval/dhp/rules.py", "hdeval/scoring/prompts.py"} <= dhp
    assert "hdeval/scoring/prompts.py" not in code_closure(REPO / "pipelines" / "prepare.py")


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
