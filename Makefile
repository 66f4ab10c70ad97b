# Two commands do all the set-up on a fresh machine:
#   make demo   creates .venv, installs, shows whether and where corrected logQ matters in a
#               synthetic world that knows P(d|u) (eval/demo/; DEMO_PIPELINE=1 adds export/ScaNN)
#   make test   creates .venv if needed, installs, runs the whole test suite
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO_DIR ?= runs/demo
# Extras of setup.py installed (editable) into .venv: test = app (the binaries: absl, ScaNN,
# TFDS, matplotlib) + keras3 (Keras 3, keras-rs, jax[cpu]) + pytest.
EXTRAS ?= test

.PHONY: venv test lint demo bench clean help

help:
	@echo "make demo | make test | make lint | make bench | make clean"

$(STAMP): setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -e ".[$(EXTRAS)]"
	@touch $(STAMP)

venv: $(STAMP)

# The suite in PYTEST_WORKERS processes (pytest-xdist), a whole test file to a process, handed
# out in tests/conftest.py's order (--no-loadscope-reorder): the longest files first, the
# in-process parameter-server file last. PYTEST_WORKERS=0 runs it in this process.
PYTEST_WORKERS ?= 2

test: $(STAMP)
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder

# The style gate (pyproject.toml): ruff's format (checked) and lint rules on the tree, mypy on the
# whole library and the binaries' entry points. `$(VENV)/bin/ruff format .` fixes the formatting.
lint: $(STAMP)
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

demo: $(STAMP)
	bash scripts/demo.sh $(DEMO_DIR)

bench: $(STAMP)
	$(PY) bench/loss_overhead.py --quick
	$(PY) bench/gradient_bias.py --quick

clean:
	rm -rf $(VENV) runs bench/out *.egg-info
