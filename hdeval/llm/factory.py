"""Build the configured LLM backend."""

from __future__ import annotations

from hdeval.llm.types import LLMBackend
from hdeval.params import LLMConfig


def make_backend(config: LLMConfig) -> LLMBackend:
    """Instantiate the backend ``config`` names (importing torch only when it is local)."""
    if config.backend == "openai":
        from hdeval.llm.openai_compat import OpenAICompatibleBackend

        return OpenAICompatibleBackend(
            base_url=config.base_url,
            model=config.model,
            api_key_env=config.api_key_env,
            concurrency=config.concurrency,
            timeout=config.timeout,
            max_retries=config.max_retries,
            min_digit_mass=config.min_digit_mass,
            max_consecutive_failures=config.max_consecutive_failures,
            max_failure_share=config.max_failure_share,
            identity=config.identity,
            connect_timeout=config.connect_timeout,
            max_context=config.max_context,
        )
    from hdeval.llm.local import TransformersBackend

    if config.backend == "embedded":
        from hdeval.llm import embedded

        path = embedded.pull(embedded.embedded_model(config.model))
    else:
        path = config.model_path
    return TransformersBackend(
        path,
        dtype=config.dtype,
        device=config.device,
        min_digit_mass=config.min_digit_mass,
        max_context=config.max_context,
        quantize=config.quantize,
    )
