"""DVC stage 'layer@N': one iteration of HD-Eval's Algorithm 1, see hdeval.stages.layer."""

import sys

from hdeval.stages import layer

if __name__ == "__main__":
    layer(int(sys.argv[1]))
