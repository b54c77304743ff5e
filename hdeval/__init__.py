"""hdeval: a trainable, explainable LLM evaluator for generated text (HD-Eval)."""

__version__ = "0.1.0"
