"""Stage prepare of dvc.yaml: validate the label files and keep the run's documents and rows. What
it reads, writes and which params it uses are declared in hdeval/pipeline/stages/prepare.py, which
runs it."""

from hdeval.pipeline.stages.prepare import STAGE

if __name__ == "__main__":
    STAGE.main()
