"""DVC stage 'report': see hdeval.stages.report."""

from hdeval.stages import run

if __name__ == "__main__":
    run("report")
