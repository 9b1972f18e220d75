"""prunesim: cycle-level simulation of CNN training with pruned or approximated gradients.

Data flows one way: traces -> methods -> engines -> system timeline -> results -> analysis.
"""

__version__ = "0.1.0"
