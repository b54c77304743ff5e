"""DVC stage 'baselines': see hdeval.stages.baselines."""

from hdeval.stages import run

if __name__ == "__main__":
    run("baselines")
