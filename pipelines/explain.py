"""DVC stage 'explain': see hdeval.stages.explain."""

from hdeval.stages import run

if __name__ == "__main__":
    run("explain")
