"""Build the configured LLM backend: a registry from each ``llm.backend`` name to the function
that builds that backend from the ``llm`` section.

A new backend is one registered builder (and its name among ``LLMConfig.backend``'s choices).
Each builder imports its backend when called, so a server judge never imports torch.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from hdeval.errors import ConfigError
from hdeval.llm.types import LLMBackend
from hdeval.params import LLMConfig

Builder = Callable[[LLMConfig], LLMBackend]

#: ``llm.backend`` -> the builder of that backend, in the order the choices are named.
BACKENDS: dict[str, Builder] = {}


def backend(name: str) -> Callable[[Builder], Builder]:
    """Register the decorated function as the builder of ``llm.backend: name``."""

    def register(build: Builder) -> Builder:
        BACKENDS[name] = build
        return build

    return register


def make_backend(config: LLMConfig) -> LLMBackend:
    """Instantiate the backend ``config`` names. A name no builder is registered for is refused
    in the words params validation uses for a name not among ``LLMConfig.backend``'s choices."""
    build = BACKENDS.get(config.backend)
    if build is None:
        *first, last = (repr(name) for name in BACKENDS)
        choices = f"{', '.join(first)} or {last}" if first else last
        raise ConfigError(f"llm.backend: Input should be {choices}")
    return build(config)


def _local(config: LLMConfig, path: str | Path | None) -> LLMBackend:
    """The in-process transformers backend on the weights at ``path``."""
    from hdeval.llm.local.backend import TransformersBackend

    return TransformersBackend(
        path,
        dtype=config.dtype,
        device=config.device,
        min_digit_mass=config.min_digit_mass,
        max_context=config.max_context,
        quantize=config.quantize,
    )


@backend("embedded")
def _embedded(config: LLMConfig) -> LLMBackend:
    """The pinned embedded weights (pulled and verified once), run in-process."""
    from hdeval.llm.local import embedded

    return _local(config, embedded.pull(embedded.embedded_model(config.model)))


@backend("transformers")
def _transformers(config: LLMConfig) -> LLMBackend:
    """Any Hugging Face directory or GGUF file (``llm.model_path``), run in-process."""
    return _local(config, config.model_path)


@backend("openai")
def _openai(config: LLMConfig) -> LLMBackend:
    """An OpenAI-compatible server at ``llm.base_url``."""
    from hdeval.llm.server.backend import OpenAICompatibleBackend

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
