"""Engines: hardware models that turn one lowered GEMM or kernel plus its operand structure into time.

One module per engine family, one interface (see sim/engines/base.py). Engines know nothing of
method names: they see the operand structure, its density and the method's own work account.
"""
