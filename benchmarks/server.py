"""Throughput of a vLLM server judge at concurrency 1, 4 and 16, next to the embedded judge on
the same texts (in the precision ``quantize: auto`` picks on this CPU, as the pipeline runs).

The summaries of one SummEval document are scored as the default pipeline scores a training
text (likelihood mode: the 4 aspect instructions and the text's own likelihood given the
source, and its likelihood without it) and as the direct-prompt baseline does (4 digit scores),
through hdeval's backends with an empty result cache each time. It prints texts per second per
judge and concurrency, and the CPU. The vLLM server is started here (vLLM's CPU build, in the
environment scripts/test.sh installs, on the embedded judge's weights) unless ``--base-url``
names a running one. Figures only, no asserts.

    python benchmarks/server.py [--texts 16] [--base-url http://host:port/v1 --model NAME]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

from scoring import cpu_line

from hdeval.llm.local.backend import TransformersBackend
from hdeval.llm.local.embedded import pull
from hdeval.llm.local.precision import resolve_quantize
from hdeval.llm.server.backend import OpenAICompatibleBackend
from hdeval.params import DataParams, TaskSpec
from hdeval.scoring.prompts import (
    criterion_prompt,
    likelihood_for,
    likelihood_instruction,
    prompt_segments,
    source_free_instruction,
    source_free_segment,
    source_segment,
)
from hdeval.tree.criteria import aspects_tree

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
TASK = TaskSpec()


def score_texts(backend, rows: list[dict]) -> float:
    """Seconds to score every row in likelihood and prompt mode, as the pipeline asks."""
    tree = aspects_tree(DataParams())
    instructions = [likelihood_for(tree, c, TASK) for c in tree] + [likelihood_instruction(TASK)]
    suffixes = [criterion_prompt(TASK, tree.lineage(c)) for c in tree]
    start = time.perf_counter()
    for row in rows:
        text = row["output"].strip()
        backend.loglikelihoods(
            [source_segment(TASK, row["source"])], [(i, text) for i in instructions]
        )
        backend.loglikelihoods([source_free_segment(TASK)], [(source_free_instruction(TASK), text)])
        backend.digit_scores(prompt_segments(TASK, row["source"], row["output"]), suffixes)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--texts", type=int, default=16, help="summaries of the first document")
    parser.add_argument("--base-url", help="a running OpenAI-compatible server's /v1 URL")
    parser.add_argument("--model", default="local", help="the model name the server serves")
    args = parser.parse_args()
    with open(REPO / "data" / "summeval" / "summeval.jsonl", encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle]
    rows = [r for r in rows if r["doc_id"] == rows[0]["doc_id"]][: args.texts]
    print(cpu_line())
    local = TransformersBackend(pull(), quantize=resolve_quantize("auto", "auto", "cpu"))
    local.load()
    seconds = score_texts(local, rows)
    print(f"embedded judge ({local.identity}): {len(rows) / seconds:.3f} texts/s")
    del local
    with contextlib.ExitStack() as stack:
        base_url = args.base_url
        if base_url is None:
            from tests.servers import MODEL_ALIAS, run_vllm_server

            base_url, _ = stack.enter_context(run_vllm_server(pull(), eager=False))
            args.model = MODEL_ALIAS
        for concurrency in (1, 4, 16):
            backend = OpenAICompatibleBackend(
                base_url, args.model, concurrency=concurrency, timeout=600, max_retries=1
            )
            backend.likelihood_problem()  # the one-time probe is not timed
            seconds = score_texts(backend, rows)
            print(
                f"vLLM at {base_url}, concurrency {concurrency:>2}: "
                f"{len(rows) / seconds:.3f} texts/s"
            )
            backend.close()


if __name__ == "__main__":
    main()
