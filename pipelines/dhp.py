"""Stage dhp of dvc.yaml: the DHP benchmark of the bundle and of the LLM baselines. What it reads,
writes and which params it uses are declared in hdeval/pipeline/stages/dhp.py, which runs it."""

from hdeval.pipeline.stages.dhp import STAGE

if __name__ == "__main__":
    STAGE.main()
