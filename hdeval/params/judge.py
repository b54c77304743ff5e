"""Section ``llm``: which judge scores the texts, and how it is reached."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from hdeval.params.base import Section, refuse_retired
from hdeval.params.url_credentials import credentials_in

#: Weights the embedded backend can pull (``llm.model``; None = the first, the default).
EMBEDDED_MODELS = ("qwen2.5-coder-0.5b-instruct-q4_k_m", "qwen2.5-coder-1.5b-instruct-q4_k_m")


class LLMConfig(Section):
    """Which judge to use: ``embedded`` (pinned registry weights, run locally), ``transformers``
    (any local Hugging Face directory or GGUF file) or ``openai`` (any OpenAI-compatible
    server: vLLM, llama.cpp, a hosted API)."""

    backend: Literal["embedded", "transformers", "openai"] = "embedded"
    """embedded, transformers or openai."""
    model_path: str | None = None
    """transformers: the Hugging Face directory or GGUF file of the weights."""
    base_url: str | None = None
    """openai: the server's ``/v1`` URL."""
    model: str | None = None
    """embedded: null (Qwen2.5-Coder-0.5B-Instruct) or ``qwen2.5-coder-1.5b-instruct-q4_k_m``
    (stronger, about three times slower); openai: the model name the server serves."""
    api_key_env: str = "OPENAI_API_KEY"
    """openai: the environment variable holding the API key (never read from a file)."""
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    """Local judges: auto is bfloat16 on a CPU with AMX (or a GPU), float32 elsewhere."""
    quantize: Literal["none", "int8", "int8_fbgemm", "auto"] = "auto"
    """Local judges: int8 runs every Linear layer with int8 weights and per-token int8
    activations (:mod:`hdeval.llm.local.int8`), fast with VNNI; int8_fbgemm runs them through
    fbgemm's kernels (7-bit weights), fast on AVX2. auto, where ``dtype: auto`` runs float32 on
    the CPU (no AMX): int8 with VNNI, int8_fbgemm without it. Either is part of the judge's
    identity: it never shares cache entries with float32."""
    device: str = "cpu"
    """Local judges: the torch device (cpu, cuda)."""
    concurrency: int = Field(4, ge=1)
    """openai: requests in flight at once, and texts scored at once."""
    timeout: float = Field(60.0, gt=0)
    """openai: seconds a request waits for its reply (the read timeout); a server that answers
    no request for this long stops the run (it takes requests but does not reply). Raise it for
    a server slower than this per request."""
    connect_timeout: float = Field(10.0, gt=0)
    """openai: seconds to wait for a connection to the server."""
    max_retries: int = Field(5, ge=0)
    """openai: retries of a request that timed out or got HTTP 408/409/429/5xx."""
    min_digit_mass: float = Field(0.5, ge=0, le=1)
    """Least probability the judge must put on the digits 1-5 for a prompt score; below it the
    reply is a recorded failure, never a number."""
    max_context: int | None = Field(None, ge=1)
    """Local judges: fit prompts to this many tokens instead of the model's own context.
    openai: the server's context in tokens (prompt and reply), where it does not report one
    (vLLM reports ``max_model_len``); prompts are cut to fit it, and the row marked truncated."""
    max_consecutive_failures: int = Field(8, ge=1)
    """openai: stop the run after this many items in a row got no usable answer."""
    max_failure_share: float = Field(0.5, gt=0, le=1)
    """openai: stop the run once more than this share of its items failed (after 20)."""
    strict_precision: bool = False
    """Refuse a bundle trained with the same judge in another precision instead of warning."""
    identity: str | None = Field(None, min_length=1)
    """openai: a name of the served weights, added to what the server reports about them
    (vLLM: ``root``, ``max_model_len`` and the server's fingerprint, which changes with new
    weights at the same path) in every cache key and bundle card. Set something that changes
    with the weights, e.g. ``qwen2.5-7b-instruct-q4_k_m@2026-11``, where the server reports
    nothing (llama.cpp, hosted APIs: a warning says so): new weights behind the same name would
    reuse cached scores of the old ones. A server without ``/v1/models`` is used only with
    it."""

    @field_validator("base_url")
    @classmethod
    def _no_credentials(cls, url: str | None) -> str | None:
        """A key in the URL would be written wherever params are: dvc.yaml tracks the whole
        ``llm`` section in dvc.lock."""
        if url and (found := credentials_in(url)):
            raise ValueError(
                f"holds credentials ({', '.join(found)}); they would be written to dvc.lock and "
                "everywhere params are recorded. Put the key in an environment variable and name "
                "it in llm.api_key_env (sent as a bearer token)"
            )
        return url

    @model_validator(mode="before")
    @classmethod
    def _retired_keys(cls, data: object) -> object:
        return refuse_retired(
            data,
            "llm",
            {"max_batch": None, "pack_tokens": None},
            " (every item is a row of its own in the judge's batched passes, so that its score "
            "never depends on what else is asked with it); delete the key",
        )

    @model_validator(mode="after")
    def _check_backend_fields(self) -> LLMConfig:
        if self.backend == "transformers" and not self.model_path:
            raise ValueError("llm.model_path is required for the transformers backend")
        if self.backend == "openai" and not (self.base_url and self.model):
            raise ValueError("llm.base_url and llm.model are required for the openai backend")
        if self.backend == "embedded" and self.model not in (None, *EMBEDDED_MODELS):
            raise ValueError(
                f"llm.model {self.model!r} is not an embedded model; choose one of "
                f"{', '.join(EMBEDDED_MODELS)} (or backend transformers with model_path)"
            )
        int8 = self.quantize in ("int8", "int8_fbgemm")
        if int8 and self.backend == "openai":
            raise ValueError("llm.quantize applies to the local backends, not to a server")
        if int8 and self.dtype not in ("auto", "float32"):
            raise ValueError(
                f"llm.quantize: {self.quantize} runs the rest of the model in float32; set "
                f"llm.dtype to auto or float32, not {self.dtype}"
            )
        if int8 and self.device != "cpu":
            raise ValueError(
                f"llm.quantize: {self.quantize} runs on the CPU only; set llm.device to cpu"
            )
        if self.identity is not None and self.backend != "openai":
            raise ValueError(
                "llm.identity names a server's weights; a local judge is named by its own"
            )
        return self
