"""System-level comparison of scored texts (``hdeval compare-systems``): which system is better,
by how much and how sure, with the evaluator's own error counted in."""
