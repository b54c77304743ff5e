"""DVC stage 'dhp': see hdeval.stages.dhp."""

from hdeval.stages import run

if __name__ == "__main__":
    run("dhp")
