"""The local judge: a causal LM run in this process with transformers (``llm.backend:
embedded`` or ``transformers``).

:mod:`~hdeval.llm.local.backend` is the backend; it lays its requests out in tokens with
:mod:`~hdeval.llm.local.framing`, and its forward passes over shared prefixes
(:mod:`~hdeval.llm.local.kv_passes`) attend row by row (:mod:`~hdeval.llm.local.row_attention`),
optionally through int8 Linear layers (:mod:`~hdeval.llm.local.int8`), in the precision the CPU
decides (:mod:`~hdeval.llm.local.precision`); :mod:`~hdeval.llm.local.embedded` pulls and
verifies the pinned embedded weights. Nothing is imported here, so that pulling the weights
loads no torch.
"""
