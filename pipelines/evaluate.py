"""DVC stage 'evaluate': see hdeval.stages.evaluate."""

from hdeval.stages import evaluate

if __name__ == "__main__":
    evaluate()
