"""What a run reports: metrics.json's summary, results.md's tables, the DVC plot tables, and
report.html, the run on one self-contained page (:func:`hdeval.report.render.write_report`)."""
