"""The PruneTrain studies: real group-lasso runs, the trajectory model's fit, the memory fit (research/README.md)."""
