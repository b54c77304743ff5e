"""Stage dhp: the DHP benchmark of the exported evaluator and of the LLM baselines on the same
perturbed texts (the acceptance stage gates the evaluator on it)."""

from hdeval import workspace as ws
from hdeval.baselines.registry import HDEVAL, make_scorers, without_likelihood
from hdeval.dhp.runner import dhp_markdown, dhp_samples, run_suite, stage_labels, summary
from hdeval.export.evaluator import Evaluator
from hdeval.llm.judge import open_judge
from hdeval.params import load_params
from hdeval.tree.criteria import aspects_tree


def main() -> None:
    params = load_params(ws.PARAMS)
    settings, data = params.dhp, params.data
    judge = open_judge(params.llm)
    names, left_out = without_likelihood([HDEVAL, *settings.baselines], judge.likelihood_problem())
    evaluator = Evaluator.load(ws.BUNDLE, judge, params.llm.strict_precision)
    scorers = make_scorers(
        names, judge, params.task, aspects_tree(data), data.aspects, evaluator, progress=True
    )
    perturber = None
    if settings.llm_perturbations:
        perturber = open_judge(settings.perturber, judge.cache) if settings.perturber else judge
    out = ws.fresh(ws.DHP)
    reads = evaluator.reads_references
    samples = dhp_samples(stage_labels(data, reads, ws.PREPARED / "test.jsonl"), settings, reads)
    results = run_suite(scorers, samples, settings, perturber, out)
    cost = judge.cost()
    if perturber is not None and perturber is not judge:
        cost["perturber_tokens"] = perturber.tokens.to_dict()
    figures = summary(results)
    ws.write_json(
        out / "summary.json",
        {
            "scorers": figures,
            "llm": cost,
            "left_out": {f"DHP {k}": v for k, v in left_out.items()},
        },
    )
    print(dhp_markdown(figures))


if __name__ == "__main__":
    ws.run_stage("dhp", main)
