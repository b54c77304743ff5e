"""Scoring texts on a criteria tree with the cached judge: hierarchy-aware prompts, likelihood
statistics, the feature-column protocol, and the resumable, prefix-sharing criterion scorer."""
