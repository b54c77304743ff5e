"""The server judge: any OpenAI-compatible endpoint (``llm.backend: openai``: vLLM, llama.cpp,
hosted APIs).

:mod:`~hdeval.llm.server.backend` is the backend. Its parts: the HTTP client and its deadlines
(:mod:`~hdeval.llm.server.client`, :mod:`~hdeval.llm.server.reply_deadline`), how a failure is
classified (:mod:`~hdeval.llm.server.failures`) and counted (:mod:`~hdeval.llm.server.breaker`),
credentials kept out of every message (:mod:`~hdeval.llm.server.urls`), what the server serves
and the identity built from it (:mod:`~hdeval.llm.server.served_model`,
:mod:`~hdeval.llm.server.fingerprint`), its context in its own tokens
(:mod:`~hdeval.llm.server.context`), digit scores read from a reply's top log-probabilities
(:mod:`~hdeval.llm.server.chat_digits`), and likelihoods read from echoed prompts
(:mod:`~hdeval.llm.server.likelihood`, :mod:`~hdeval.llm.server.echo`,
:mod:`~hdeval.llm.server.prefix_cache`). Nothing is imported here.
"""
