"""DVC stage 'train': see hdeval.stages.train."""

from hdeval.stages import run

if __name__ == "__main__":
    run("train")
