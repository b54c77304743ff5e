"""Where the prompt tokens of one text go, with the current templates (tokenizer only, no model).

For the summaries of the first ``--docs`` SummEval documents and the layer-1 criteria of
``data/summeval/aspects.yaml``, prints the mean token counts of every part of a request as the
local backend lays it out (chat head + segments + suffix + chat tail, each tokenised on its own):

  prompt mode      document segment (computed once per document), text segment (text + the
                   rating instructions, once per text), criterion suffix + chat tail (per criterion)
  likelihood mode  document segment and, per criterion, instruction + chat tail (once per
                   document); per text, the text once after every instruction (but its last
                   token, which predicts nothing)

and the prompt tokens per text for ``k`` criteria, the document's share split over its texts.

    python benchmarks/tokens.py [--docs 8] [--criteria 4 12]
"""

from __future__ import annotations

import argparse
from pathlib import Path
from statistics import mean

import yaml
from transformers import AutoTokenizer

from hdeval.data.summeval import development_rows
from hdeval.llm.local.embedded import pull
from hdeval.params import TaskSpec
from hdeval.scoring.prompts import (
    criterion_prompt,
    likelihood_instruction,
    output_segment,
    source_segment,
)
from hdeval.tree.criteria import Criterion

REPO = Path(__file__).resolve().parents[1]
TASK = TaskSpec()
_MARK = "\u2063M\u2063"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--docs", type=int, default=8)
    parser.add_argument("--criteria", type=int, nargs="+", default=[4, 12])
    args = parser.parse_args()
    tok = AutoTokenizer.from_pretrained(pull())

    def n(text: str) -> int:
        return len(tok(text, add_special_tokens=False)["input_ids"])

    rendered = tok.apply_chat_template(
        [{"role": "user", "content": _MARK}], tokenize=False, add_generation_prompt=True
    )
    head, tail = (n(part) for part in rendered.split(_MARK))
    rows = development_rows(REPO)
    docs = list(dict.fromkeys(r["doc_id"] for r in rows))[: args.docs]
    rows = [r for r in rows if r["doc_id"] in docs]
    spec = yaml.safe_load((REPO / "data" / "summeval" / "aspects.yaml").read_text())["criteria"]
    criteria = [Criterion(c["id"], c["name"], c["definition"], None, 1) for c in spec]

    per_doc = len(rows) / len(docs)
    source = mean(n(source_segment(TASK, r["source"])) for r in rows)
    text = mean(n(r["output"].strip()) for r in rows)
    out_seg = mean(n(output_segment(TASK, r["output"])) for r in rows)
    suffix = mean(n(criterion_prompt(TASK, [c])) for c in criteria) + tail
    instruction = mean(n(likelihood_instruction(TASK, [c])) for c in criteria) + tail
    plain = n(likelihood_instruction(TASK)) + tail
    share = (head + source) / per_doc

    print(f"{len(rows)} texts of {len(docs)} documents ({per_doc:.1f} texts per document)")
    print(f"chat template: head {head}, tail {tail} tokens")
    print(f"document segment (once per document)          {source:7.1f}")
    print(f"  its share per text                          {share:7.1f}")
    print(f"text alone                                    {text:7.1f}")
    print(f"prompt: text segment (text + instructions)    {out_seg:7.1f}")
    print(f"prompt: criterion suffix + tail, layer 1      {suffix:7.1f}")
    print(f"likelihood: instruction + tail, layer 1       {instruction:7.1f}")
    print(f"likelihood: unconditioned instruction + tail  {plain:7.1f}")
    for k in args.criteria:
        prompt = share + out_seg + k * suffix
        instructions = (k * instruction + plain) / per_doc
        lik = share + instructions + (k + 1) * (text - 1)
        print(
            f"\n{k} criteria, prompt tokens per text: prompt mode {prompt:6.0f} "
            f"(text segment {out_seg / prompt:.0%}, suffixes {k * suffix / prompt:.0%}, "
            f"document share {share / prompt:.0%}); likelihood mode {lik:6.0f} "
            f"(text read after each instruction {(k + 1) * (text - 1) / lik:.0%}, instructions' "
            f"share {instructions / lik:.0%}, document share {share / lik:.0%})"
        )


if __name__ == "__main__":
    main()
