"""The LLM judge: one small backend interface, the cached judge every caller asks, and two
backends, each a subpackage of its own.

- here: the interface and its results (:mod:`~hdeval.llm.types`), the cached judge
  (:mod:`~hdeval.llm.judge`) over the result cache (:mod:`~hdeval.llm.cache`), the checks and
  readings every backend's answers share (:mod:`~hdeval.llm.validity`,
  :mod:`~hdeval.llm.digits`, :mod:`~hdeval.llm.truncation`, :mod:`~hdeval.llm.chat_template`)
  and the registry of backends (:mod:`~hdeval.llm.factory`);
- :mod:`hdeval.llm.local`: the in-process transformers model (``embedded``, ``transformers``);
- :mod:`hdeval.llm.server`: an OpenAI-compatible server (``openai``).
"""

from hdeval.llm.types import DigitScore, LLMBackend, LogLikelihood

__all__ = ["DigitScore", "LLMBackend", "LogLikelihood"]
