"""Training the aggregator (HD-Eval §2.2-2.3, Algorithm 1): white-box aggregators, attribution
pruning, the layer-by-layer alignment loop, model selection, Optuna tuning, the final fit."""
