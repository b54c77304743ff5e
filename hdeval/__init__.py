"""hdeval: a trainable, explainable LLM evaluator for generated text (HD-Eval).

The public API, for scoring texts with a trained evaluator::

    from hdeval import Evaluator, LLMConfig, open_judge

    evaluator = Evaluator.load("models/evaluator", open_judge(LLMConfig()))
    evaluator.score(source=article, text=summary)

The names load on first use, so ``import hdeval`` imports neither torch, scikit-learn nor
pandas: the production path needs numpy, onnxruntime and the judge's client only.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

#: Public name -> the module that defines it.
_PUBLIC = {
    "Evaluator": "hdeval.export.evaluator",
    "open_judge": "hdeval.llm.judge",
    "CachedJudge": "hdeval.llm.judge",
    "LLMConfig": "hdeval.params",
    "Params": "hdeval.params",
    "load_params": "hdeval.params",
}

__all__ = [
    "CachedJudge",
    "Evaluator",
    "LLMConfig",
    "Params",
    "__version__",
    "load_params",
    "open_judge",
]


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'hdeval' has no attribute {name!r}")
