"""Stage explain of dvc.yaml: the shipped bundle on every row through the production path; SHAP.
What it reads, writes and which params it uses are declared in hdeval/pipeline/stages/explain.py,
which runs it."""

from hdeval.pipeline.stages.explain import STAGE

if __name__ == "__main__":
    STAGE.main()
