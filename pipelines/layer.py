"""Stage layer@N: one iteration of HD-Eval's Algorithm 1 (grow, score, proxy, select)."""

import sys

from hdeval import workspace as ws
from hdeval.data import load_labels
from hdeval.errors import ConfigError
from hdeval.llm.judge import open_decomposer, open_judge
from hdeval.params import load_params
from hdeval.training.hierarchy import next_layer, run_layer, usable_modes
from hdeval.tree.criteria import CriteriaTree, aspects_tree


def main(number: int) -> None:
    params = load_params(ws.PARAMS)
    if not 1 <= number <= params.hierarchy.layers:
        raise ConfigError(
            f"dvc.yaml runs layer {number} but params hierarchy.layers is "
            f"{params.hierarchy.layers}; make the layer list in dvc.yaml match it"
        )
    train = load_labels(ws.PREPARED / "train.jsonl", params.data.aspects, params.data.score_range)
    judge = open_judge(params.llm)
    hierarchy, left_out = usable_modes(params.hierarchy, judge.likelihood_problem())
    if number == 1:
        tree, selected, modes, grow = aspects_tree(params.data), [], hierarchy.modes, True
    else:
        previous = ws.layer_dir(number - 1)
        tree = CriteriaTree.from_yaml(previous / "tree.yaml")
        report = ws.read_json(previous / "report.json")
        selected, (modes, grow) = report["selected"], next_layer(report)
    decomposer = None
    if number > 1 and grow:
        decomposer = open_decomposer(params.hierarchy.decomposer, params.llm, judge)
    layer = run_layer(
        number, tree, selected, train, judge, params.task, hierarchy, True, decomposer, modes, grow
    )
    out = ws.fresh(ws.layer_dir(number))
    layer.tree.to_yaml(out / "tree.yaml")
    layer.run.features.to_csv(out / "features.csv")
    report = {
        **layer.report.to_dict(),
        **judge.cost(),
        "failed_scores": len(layer.run.failures),
        "truncated_samples": layer.run.truncated_samples,
        "not_decomposed": layer.not_decomposed,
        "llm_identity": judge.identity,
        "left_out": left_out,
    }
    if decomposer is not None:
        report["decomposer"] = {"identity": decomposer.identity, **decomposer.tokens.to_dict()}
    ws.write_json(out / "report.json", report)
    print(f"layer {number}: {layer.run.summary()}")


if __name__ == "__main__":
    ws.run_stage(f"layer@{sys.argv[1]}", main, int(sys.argv[1]))
