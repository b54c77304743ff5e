"""DVC stage 'prepare': see hdeval.stages.prepare."""

from hdeval.stages import prepare

if __name__ == "__main__":
    prepare()
