# Everything builds its own virtualenv, so each target works on a fresh machine
# that has only Python 3.11+ and make.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# Optional extras join with a comma: `make test EXTRAS=test,dev,ray` runs the Ray tests too.
EXTRAS ?= test,dev
STAMP := $(VENV)/.installed-$(shell (cat pyproject.toml; echo '$(EXTRAS)') | cksum | cut -d' ' -f1)

.PHONY: demo test lint check bench bench-quick bench-remote clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[$(EXTRAS)]'
	rm -f $(VENV)/.installed-* && touch $@

demo: $(STAMP)
	$(PY) examples/agent_tree.py

test: $(STAMP)
	$(PY) -m pytest -q

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

check: lint test

bench: $(STAMP)
	$(PY) bench/run.py

bench-quick: $(STAMP)
	$(PY) bench/run.py --quick

bench-remote: $(STAMP)
	$(PY) -m pip install --quiet -e '.[ray]'
	$(PY) bench/remote_bench.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
