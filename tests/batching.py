"""How far an item's answer may move with what else is computed beside it, by the judge's
precision (docs/design.md, "Every item a row of its own")."""

from __future__ import annotations

#: int8 Linear layers and fp32: an item's likelihood alone and in any batch, in nats per token
#: (and a score computed from it).
EXACT_TOLERANCE = 1e-6
#: bf16 on a CPU with AMX tiles: the matrix kernels pick their blocking by a product's height,
#: so a row rounds otherwise in a batch of another size (measured on a 2-core AMX Xeon: 1.8e-3
#: nats per token in a likelihood, 1.3e-3 in a score on 1-5).
BF16_TOLERANCE = 1e-2


def batch_tolerance(identity: str) -> float:
    """The tolerance for a judge named ``identity`` (its precision is the last field)."""
    return BF16_TOLERANCE if identity.endswith("bfloat16") else EXACT_TOLERANCE


#: A text's likelihood read off the pass over the text with its end-of-reply marker after it
#: (:meth:`hdeval.llm.judge.CachedJudge.loglikelihoods`): a pass rounds its last rows by its
#: height, and int8 layers carry that into the answer. Measured on the embedded 0.5B, as the
#: mean of a text's token log-probabilities: 9e-3 nats in int8, 4e-3 in bf16, 1e-6 in fp32.
READ_OFF_TOLERANCE = 2e-2
