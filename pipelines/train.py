"""Stage train of dvc.yaml: the shipped bundle, selected and fit on every row of the run. What it
reads, writes and which params it uses are declared in hdeval/pipeline/stages/train.py, which runs
it."""

from hdeval.pipeline.stages.train import STAGE

if __name__ == "__main__":
    STAGE.main()
