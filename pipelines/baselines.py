"""Stage baselines of dvc.yaml: the same judge's prompt and likelihood baselines on every row. What
it reads, writes and which params it uses are declared in hdeval/pipeline/stages/baselines.py, which
runs it."""

from hdeval.pipeline.stages.baselines import STAGE

if __name__ == "__main__":
    STAGE.main()
