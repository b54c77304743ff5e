"""Stage report of dvc.yaml: metrics.json, results.md and report.html of the run. What it reads,
writes and which params it uses are declared in hdeval/pipeline/stages/report.py, which runs it."""

from hdeval.pipeline.stages.report import STAGE

if __name__ == "__main__":
    STAGE.main()
