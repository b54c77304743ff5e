"""DVC stage 'evaluate': see hdeval.stages.evaluate."""

from hdeval.stages import run

if __name__ == "__main__":
    run("evaluate")
