"""Stage acceptance of dvc.yaml: the bundle's gates (DHP, same-judge baselines). What it reads,
writes and which params it uses are declared in hdeval/pipeline/stages/acceptance.py, which runs
it."""

from hdeval.pipeline.stages.acceptance import STAGE

if __name__ == "__main__":
    STAGE.main()
