"""Analysis: tables, plots and validation reports built from simulation results (the last stage)."""
