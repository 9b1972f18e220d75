"""Studies behind prunesim's fitted models; not on the simulator's runtime path (research/README.md)."""
