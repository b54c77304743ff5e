"""DVC stage 'train': see hdeval.stages.train."""

from hdeval.stages import train

if __name__ == "__main__":
    train()
