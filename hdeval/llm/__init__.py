"""LLM backends: one small interface, a local transformers backend and an OpenAI-compatible one."""

from hdeval.llm.types import DigitScore, LLMBackend, LogLikelihood

__all__ = ["DigitScore", "LLMBackend", "LogLikelihood"]
