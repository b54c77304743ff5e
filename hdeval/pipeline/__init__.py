"""The pipeline's stages as library functions (the one definition of their order), the working
tree they read and write, the acceptance gates and the cost estimate of a run."""
