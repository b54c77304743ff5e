"""The criteria tree (HD-Eval §2.1): the human aspects (layer 1), their definitions, and the
LLM's decomposition of a criterion into finer ones (its prompt, reply parsing and driver)."""
