"""Stage evaluate of dvc.yaml: every row scored on the final tree, cross-fitted with nested
selection. What it reads, writes and which params it uses are declared in
hdeval/pipeline/stages/evaluate.py, which runs it."""

from hdeval.pipeline.stages.evaluate import STAGE

if __name__ == "__main__":
    STAGE.main()
