"""Stage baselines: the same judge as direct prompts, an overall prompt, GPTScore likelihood,
ROUGE and a published peer's predictions (``evaluate.peer``), against HD-Eval and its ablations
on the same rows: every row of the run, the bundle by its cross-fitted predictions."""

import pandas as pd

from hdeval import workspace as ws
from hdeval.baselines import compare, entries, render_markdown
from hdeval.baselines.peer import peer_scores, read_peer
from hdeval.baselines.registry import BASELINES, make_scorers, without_likelihood
from hdeval.data import load_labels
from hdeval.llm.judge import open_judge
from hdeval.params import load_params
from hdeval.tree.criteria import aspects_tree


def main() -> None:
    params = load_params(ws.PARAMS)
    test = load_labels(ws.ROWS, params.data.aspects, params.data.score_range)
    judge = open_judge(params.llm)
    scores: dict = {
        path.stem: ws.read_features(path)
        for path in sorted((ws.EVALUATE / "predictions").glob("*.csv"))
    }
    names, left_out = without_likelihood(BASELINES, judge.likelihood_problem())
    scorers = make_scorers(
        names, judge, params.task, aspects_tree(params.data), params.data.aspects, progress=True
    )
    scores.update({scorer.name: scorer.score(test.samples) for scorer in scorers})
    peer = params.evaluate.peer
    if peer is not None and peer.path.is_file():  # a yardstick: read here only
        table = read_peer(peer.path, peer.format, params.data.aspects)
        scores[peer.name] = peer_scores(table, test.samples.index, peer.path)
    elif peer is not None:
        left_out[f"peer {peer.name}"] = f"{peer.path} not found (evaluate.peer.path)"
    table = compare(
        scores,
        test.samples,
        test.targets,
        n_boot=params.evaluate.bootstrap,
        seed=params.hierarchy.seed,
    )
    out = ws.fresh(ws.BASELINES)
    table.to_csv(out / "compare.csv", index=False)
    aspects = list(test.targets.columns)  # each entry's predictions, for paired comparisons
    predicted = [
        frame.assign(entry=entry)
        for name, scored in scores.items()
        for entry, frame in entries(name, scored.reindex(test.samples.index), aspects).items()
    ]
    pd.concat(predicted).rename_axis("id").to_csv(out / "predictions.csv")
    (out / "compare.md").write_text(
        render_markdown(table, levels=("dataset", "summary"), correlations=("pearson", "spearman"))
    )
    ws.write_json(out / "cost.json", judge.cost())
    ws.write_json(out / "left_out.json", {f"baseline {k}": v for k, v in left_out.items()})
    print(f"comparison of {table['scorer'].nunique()} scorers written to {out / 'compare.md'}")


if __name__ == "__main__":
    ws.run_stage("baselines", main)
