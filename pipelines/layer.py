"""DVC stage 'layer@N': one iteration of HD-Eval's Algorithm 1, see hdeval.stages.layer."""

import sys

from hdeval.stages import run

if __name__ == "__main__":
    run("layer", *sys.argv[1:])
