"""Stage layer of dvc.yaml: one iteration of HD-Eval's Algorithm 1 (grow, score, proxy, select):
layer N. What it reads, writes and which params it uses are declared in
hdeval/pipeline/stages/layer.py, which runs it."""

from hdeval.pipeline.stages.layer import STAGE

if __name__ == "__main__":
    STAGE.main()
