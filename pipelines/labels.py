"""Stage labels of dvc.yaml: a manifest of the sha256 of every label file the params name. What it
reads, writes and which params it uses are declared in hdeval/pipeline/stages/labels.py, which runs
it."""

from hdeval.pipeline.stages.labels import STAGE

if __name__ == "__main__":
    STAGE.main()
