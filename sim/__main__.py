"""Entry point for `python -m sim`: the same as the `prunesim` command."""
import sys

from sim.cli import main

sys.exit(main())
