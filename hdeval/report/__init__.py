"""What a run reports: the metrics summary, results.md's tables and the plots."""
