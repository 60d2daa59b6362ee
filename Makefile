# Everything builds its own virtualenv, so each target works on a fresh machine
# that has only Python 3.11+ and make.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The demo needs no extras beyond the tests'; `make test` and `make lint` add the
# [ray], [bench], [postgres] and [otel] extras: the remote kind is tested against a
# real local Ray, the PostgreSQL ledger against a real server the tests start, traces
# against OpenTelemetry's SDK, and the benchmarks (with their peers) are type-checked.
EXTRAS ?= test,dev
STAMP := $(VENV)/.installed-$(shell (cat pyproject.toml; echo '$(EXTRAS)') | cksum | cut -d' ' -f1)

.PHONY: demo test lint pytest browser static generate check postgres-server cpython-tests sudo docs \
	docs-build \
	dist-check \
	dist-run test-pythons \
	bench bench-quick bench-run bench-remote bench-scaling bench-scaling-run bench-cluster bench-cluster-run soak mutate clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[$(EXTRAS)]'
	rm -f $(VENV)/.installed-* && touch $@

demo: $(STAMP)
	$(PY) examples/agent_tree.py

test: postgres-server cpython-tests sudo
	@$(MAKE) --no-print-directory pytest EXTRAS=test,dev,ray,bench,http,postgres,mcp,otel

# The escape suite checks that sudo answers as documented under no_new_privs: install
# Debian's sudo when missing and we may (root); otherwise that test says why it skips.
sudo:
	@if command -v sudo >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing Debian's sudo package for the escape suite"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			--no-install-recommends sudo) >/dev/null 2>&1 || echo "could not install sudo"; \
	fi

lint:
	@$(MAKE) --no-print-directory static EXTRAS=test,dev,ray,bench,http,postgres,mcp,otel

# The PostgreSQL ledger's tests start Debian's server themselves (tests/postgres_server.py):
# install it when missing and we may (root); otherwise those tests skip, saying why.
postgres-server:
	@if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing Debian's postgresql package for the PostgreSQL ledger's tests"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			--no-install-recommends postgresql >/dev/null; \
	else \
		echo "no PostgreSQL server binaries and not root with apt-get: the PostgreSQL" \
			"ledger's tests will skip (install Debian's postgresql package to run them)"; \
	fi

# CPython's own concurrent.futures tests run against sup.executor() and sup.pool()
# (tests/cpython/executor_cases.py): Debian ships them for its Python in
# libpython3.X-testsuite. Installed when missing and we may (root); otherwise
# those tests skip, saying why.
PY_MINOR := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
cpython-tests:
	@if [ -f /usr/lib/python$(PY_MINOR)/test/test_concurrent_futures.py ] || \
		$(PYTHON) -c 'import sysconfig, pathlib, sys; sys.exit(not (pathlib.Path(sysconfig.get_path("stdlib")) / "test/test_concurrent_futures.py").is_file())'; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing Debian's libpython$(PY_MINOR)-testsuite for CPython's executor tests"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			--no-install-recommends libpython$(PY_MINOR)-testsuite) >/dev/null 2>&1 || \
			echo "no libpython$(PY_MINOR)-testsuite: CPython's executor tests will skip"; \
	fi

# Up to 4 pytest processes, one per core (-n auto): most tests wait on real
# processes, signals and fsyncs, so a 2-core machine runs the suite in about half
# the time. --dist loadfile keeps a file's tests in one process: a docs page's
# examples share a namespace, and module-scoped supervisors stay shared.
PYTEST_PROCESSES ?= -n auto --maxprocesses 4 --dist loadfile
pytest: $(STAMP) browser
	$(PY) -m pytest -q $(PYTEST_PROCESSES)

# The web view's browser test drives Debian's chromium through Playwright's API
# (never `playwright install`, which downloads a browser build). As root, as CI
# runs, it is installed when missing; otherwise that test says why it skips.
browser:
	@if [ ! -x /usr/bin/chromium ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing chromium and chromium-driver for the web view's test"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			chromium chromium-driver) >/dev/null 2>&1 || echo "could not install chromium"; \
	fi

# Each surface's verbs and their async twins, written from workunits/_surface/ by
# tools/gen_surfaces.py: `make generate` after editing the definitions; the lint
# fails when a generated file is not what they make.
generate: $(STAMP)
	$(PY) tools/gen_surfaces.py

static: $(STAMP)
	$(PY) tools/gen_surfaces.py --check
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy
	$(VENV)/bin/lint-imports

check: lint test

# The site under site/, from docs/ and the docstrings; strict: any warning fails it.
docs:
	@$(MAKE) --no-print-directory docs-build EXTRAS=docs

docs-build: $(STAMP)
	$(VENV)/bin/mkdocs build --strict --clean

# The release artefacts: wheel and sdist built and checked by twine, then installed
# into a fresh venv where `workunits --help` and the README's first example must work.
dist-check:
	@$(MAKE) --no-print-directory dist-run EXTRAS=dev

dist-run: $(STAMP)
	rm -rf dist
	$(PY) -m build --outdir dist .
	$(PY) -m twine check --strict dist/*
	.ci/check-dist dist

# The core tests on every CPython >= 3.11 on this machine (PATH and pyenv), each in
# a venv of its own (.venv-pythons/X.Y).
test-pythons:
	.ci/test-pythons

# The benches run their peers too: pebble, matplotlib and DBOS ([bench]), Ray ([ray]).
bench:
	@$(MAKE) --no-print-directory bench-run EXTRAS=test,dev,ray,bench,http

bench-quick:
	@$(MAKE) --no-print-directory bench-run EXTRAS=test,dev,ray,bench,http BENCH_ARGS=--quick

bench-run: $(STAMP)
	$(PY) bench/run.py $(BENCH_ARGS)

# Issue 20: PostgreSQL against SQLite and DBOS, failover and kill latency in a cluster
# (starts its own PostgreSQL server; ~2 min). The table goes by hand into bench/RESULTS.md.
bench-cluster:
	@$(MAKE) --no-print-directory bench-cluster-run EXTRAS=test,dev,bench,postgres

bench-cluster-run: $(STAMP)
	$(PY) bench/failover_bench.py

# How cost grows with live idle units (10 .. 5,000) and ledger rows (10k .. 1M):
# the table goes into bench/RESULTS.md, the plot to bench/scaling.png (~10 min).
bench-scaling:
	@$(MAKE) --no-print-directory bench-scaling-run EXTRAS=test,dev,bench

bench-scaling-run: $(STAMP)
	$(PY) bench/scaling.py --markdown bench/RESULTS.md --plot bench/scaling.png

# Ten minutes of mixed load (not in CI): units/s, RSS and fds over time.
soak: $(STAMP)
	$(PY) bench/soak.py --seconds 600 --every 30

# Mutation testing of the lifecycle core's pure modules ([tool.mutmut] in
# pyproject.toml) against the fast tests that cover them. Not in CI: each mutant
# reruns its tests. Time-capped; MUTANTS narrows it (e.g. 'workunits.supervisor.actor.deadlines*').
MUTATE_TIMEOUT ?= 1800
MUTANTS ?=
# mutants/src on PYTHONPATH (made first: Python skips a path missing at start-up)
# so the zygote and unit processes import the same mutated copy as the tests.
mutate: $(STAMP)
	mkdir -p mutants/src
	PYTHONPATH=$(CURDIR)/mutants/src WORKUNITS_MACHINE_EXAMPLES=5 timeout $(MUTATE_TIMEOUT) $(VENV)/bin/mutmut run \
		--max-children 2 $(MUTANTS); status=$$?; \
	$(VENV)/bin/mutmut results; exit $$status

bench-remote: $(STAMP)
	$(PY) -m pip install --quiet -e '.[ray]'
	$(PY) bench/remote_bench.py

clean:
	rm -rf $(VENV) mutants .venv-pythons .pytest_cache .mypy_cache .ruff_cache site dist
