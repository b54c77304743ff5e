"""DVC stage 'prepare': see hdeval.stages.prepare."""

from hdeval.stages import run

if __name__ == "__main__":
    run("prepare")
