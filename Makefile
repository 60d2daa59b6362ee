# Everything builds its own virtualenv, so each target works on a fresh machine
# that has only Python 3.11+ and make.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The demo needs no extras beyond the tests'; `make test` and `make lint` add the
# [ray] extra so the remote kind is tested against a real local Ray.
EXTRAS ?= test,dev
STAMP := $(VENV)/.installed-$(shell (cat pyproject.toml; echo '$(EXTRAS)') | cksum | cut -d' ' -f1)

.PHONY: demo test lint pytest static check bench bench-quick bench-remote soak clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[$(EXTRAS)]'
	rm -f $(VENV)/.installed-* && touch $@

demo: $(STAMP)
	$(PY) examples/agent_tree.py

test:
	@$(MAKE) --no-print-directory pytest EXTRAS=test,dev,ray

lint:
	@$(MAKE) --no-print-directory static EXTRAS=test,dev,ray

pytest: $(STAMP)
	$(PY) -m pytest -q

static: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

check: lint test

bench: $(STAMP)
	$(PY) bench/run.py

bench-quick: $(STAMP)
	$(PY) bench/run.py --quick

# Ten minutes of mixed load (not in CI): units/s, RSS and fds over time.
soak: $(STAMP)
	$(PY) bench/soak.py --seconds 600 --every 30

bench-remote: $(STAMP)
	$(PY) -m pip install --quiet -e '.[ray]'
	$(PY) bench/remote_bench.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
