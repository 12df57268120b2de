PYTHON ?= python3
VENV := .venv
# What make demo's environment installs: the extras the README's commands use (`fxdurable
# serve`, the Redis/RQ workers, SQS and DynamoDB), so each runs in the venv make demo made.
DEMO_EXTRAS := http,redis,aws
BIN := $(VENV)/bin
# The bench's own environment: fxdurable plus the peers it is measured against (DBOS,
# LangGraph), pinned in bench/requirements-peers.txt. Never the project's dependencies.
BENCH_VENV := .venv-bench
BENCH_BIN := $(BENCH_VENV)/bin

# Directories that are linted; ones that do not exist yet (e.g. bench/) are skipped.
LINT_PATHS := $(wildcard fxdurable tests bench workers handlers examples)
# The example projects a user copies (examples/*/ but the coding agent): each is its own
# project, typed as users type theirs (mypy --strict, files as given, no package), one mypy run
# per project (two projects may each have an agent.py).
EXAMPLE_PROJECTS := $(wildcard examples/real_provider_agent/*.py examples/starlette_app/*.py examples/rq_workers/*.py examples/pydantic_ai_project/*.py)
EXAMPLE_MCP := $(wildcard examples/mcp_project/*.py)
# Each its own mypy run: their ops_agent.py share a module name with pydantic_ai_project's.
EXAMPLE_FRAMEWORKS := examples/langchain_project examples/openai_agents_project

.PHONY: demo coding-demo coding-ui coding-screenshot venv-python lint test test-fast browser postgres-server bench bench-abort bench-venv wheel clean deploy \
	localstack-test docs soak

# Before a venv is built or used: $(PYTHON) must be 3.11+, and a $(VENV) made by another
# Python version (or broken) is removed to be rebuilt (scripts/check-venv says which).
venv-python:
	@scripts/check-venv "$(PYTHON)" "$(VENV)"

# Full dev/test environment: the package in editable mode plus the test extras.
$(VENV)/.installed: pyproject.toml
	@scripts/check-venv "$(PYTHON)" "$(VENV)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@

# Runtime environment for the demo (DEMO_EXTRAS); reuses the test environment when it is
# current (the test extras include all of them).
$(VENV)/.installed-demo: pyproject.toml
	@if [ -f $(VENV)/.installed ] && [ $(VENV)/.installed -nt pyproject.toml ]; then \
		echo "reusing $(VENV) (test environment already installed)"; \
	else \
		set -e; \
		$(PYTHON) -m venv $(VENV); \
		$(BIN)/python -m pip install -q --upgrade pip; \
		$(BIN)/python -m pip install -q -e '.[$(DEMO_EXTRAS)]'; \
	fi
	touch $@

# The check runs first, then a make of its own decides whether the (maybe removed) venv needs
# building: its stamps are looked at only after the check.
demo: venv-python
	@$(MAKE) --no-print-directory $(VENV)/.installed-demo
	$(BIN)/fxdurable demo $(ARGS)

# The coding agent (examples/coding_agent/): fixes a small project's failing tests, durably, in
# ./.fxd-coding/. ARGS go to run.py, e.g. ARGS="--crash-at tool.after-execute:edit_file".
coding-demo: venv-python
	@$(MAKE) --no-print-directory $(VENV)/.installed-demo
	$(BIN)/python examples/coding_agent/run.py $(ARGS)

# The coding agent in a browser tab: http://127.0.0.1:8000/ (each session its own copy of the
# project under ./.fxd-coding/; turns run in a worker process the page's crash button kills).
# Each edit waits FXD_CODING_PACE_S (1.5 s) before it writes: time to press the button mid-edit.
coding-ui: venv-python
	@$(MAKE) --no-print-directory $(VENV)/.installed-demo
	@mkdir -p .fxd-coding
	FXD_CODING_DIR=.fxd-coding FXD_CODING_PACE_S=$${FXD_CODING_PACE_S-1.5} \
		$(BIN)/fxdurable serve --dev --demo --db .fxd-coding/coding.db \
		--agents examples.coding_agent.web:agents $(ARGS)

lint: $(VENV)/.installed
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/ruff format --check $(LINT_PATHS)
	$(BIN)/mypy fxdurable
	$(BIN)/mypy --strict $(EXAMPLE_PROJECTS)
	$(BIN)/mypy --strict $(EXAMPLE_MCP)
	for project in $(EXAMPLE_FRAMEWORKS); do $(BIN)/mypy --strict $$project/*.py || exit 1; done

# The docs site (mkdocs.yml, docs/) into site/, strictly: a broken link, a missing page or a
# docstring the API reference cannot render fails it. Uses the test environment (the test
# extra has mkdocs-material and mkdocstrings); ~15 s.
docs: $(VENV)/.installed
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# Regenerates docs/coding-agent.png: the coding page after a crash mid-edit, in headless
# chromium (scripts/coding_screenshot.py).
coding-screenshot: $(VENV)/.installed browser
	$(BIN)/python scripts/coding_screenshot.py

# The browser tests (tests/console/) drive Debian's chromium with Playwright for Python (never
# Playwright's own browser downloads). As root, a missing chromium is installed; otherwise this
# says what to install, and fails in CI (CI=true): the browser tests never skip.
browser:
	@if command -v chromium >/dev/null 2>&1 || [ -n "$${FXD_TEST_CHROMIUM:-}" ]; then \
		:; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing Debian's chromium for the browser tests (tests/console/)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	else \
		echo "chromium not found: the browser tests (tests/console/) will fail; install it with: sudo apt-get install -y chromium" >&2; \
		if [ "$${CI:-}" = "true" ]; then \
			echo "CI=true and chromium is missing: failing" >&2; \
			exit 1; \
		fi; \
	fi

# The PostgreSQL tests initdb a server of their own (tests/postgres_support.py) from Debian's
# postgresql package: as root a missing one is installed; otherwise this says what to install,
# and fails in CI (CI=true): the PostgreSQL tests never skip there.
postgres-server:
	@if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || [ -n "$${FXD_TEST_PG_BIN:-}" ]; then \
		:; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing Debian's postgresql for the PostgreSQL tests"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; \
	else \
		echo "PostgreSQL's initdb not found: the PostgreSQL tests will be skipped; install it with: sudo apt-get install -y postgresql" >&2; \
		if [ "$${CI:-}" = "true" ]; then \
			echo "CI=true and postgresql is missing: failing" >&2; \
			exit 1; \
		fi; \
	fi

test: $(VENV)/.installed browser postgres-server
	@if ! command -v redis-server >/dev/null 2>&1; then \
		echo "redis-server not found: Redis tests will be skipped; install redis-server to run them"; \
		if [ "$${CI:-}" = "true" ]; then \
			echo "CI=true and redis-server is missing: failing" >&2; \
			exit 1; \
		fi; \
	fi
	$(MAKE) --no-print-directory lint
	$(MAKE) --no-print-directory docs
	scripts/run-tests $(PYTEST_ARGS)

# The inner loop: the fast tier only (unit, journal, store contract on SQLite, HTTP in process;
# no lint, no docs), ~3 minutes on 2 cores. The system tests (marked by tests/tiers.py: a
# server, a subprocess, a browser, a wheel) are left out, and a fast-tier test that starts a
# process fails. CI runs make test, the whole suite. Exit 5 (nothing collected) fails.
test-fast: $(VENV)/.installed
	scripts/run-tests --fast $(PYTEST_ARGS)

# The soak (docs/soak.md): random SIGKILLs, store outages and pauses on every store/queue
# pair, judged by effect ledgers and fxdurable check. Under 10 minutes by default;
# SOAK_S=<seconds of faults per pair>, SOAK_PAIRS=sqlite-rq,redis-rq,dynamodb-sqs,sqlite-embedded,
# SOAK_SEED=<a run's seed, to replay it>. Needs redis-server (and moto, from the test extras).
soak: $(VENV)/.installed
	SOAK_S="$(SOAK_S)" SOAK_PAIRS="$(SOAK_PAIRS)" SOAK_SEED="$(SOAK_SEED)" $(BIN)/python -m bench.soak $(ARGS)

$(BENCH_VENV)/.installed: pyproject.toml bench/requirements-peers.txt
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_BIN)/python -m pip install -q --upgrade pip
	$(BENCH_BIN)/python -m pip install -q -e '.[redis,http,lambda,postgres]' -r bench/requirements-peers.txt
	touch $@

bench-venv: $(BENCH_VENV)/.installed

# Measures fxdurable beside DBOS and LangGraph in one run; prints the headline table and
# writes bench/results/latest.json and docs/benchmarks.md. ARGS=--quick for a short run.
bench: $(BENCH_VENV)/.installed
	$(BENCH_BIN)/python -m bench --write $(ARGS)

# Abort-to-cancelled latency per store (docs/aborting.md): p50/p99 from the abort call to the
# tool seeing its cancellation. ARGS=--samples N (default 40).
bench-abort: $(VENV)/.installed
	$(BIN)/python -m bench.abort_latency $(ARGS)

# AWS Lambda: deploys examples/lambda_project (what `fxdurable init lambda` writes; its
# template is infra/template.yaml) with this checkout's fxdurable. Needs the SAM CLI, python3.12
# and AWS credentials (its `make check` says what is missing and how to get it); asks for the
# stack name, region and parameters the first time and saves them in samconfig.toml. Your own
# project: docs/deployment/lambda.md.
deploy: $(VENV)/.installed-demo
	$(MAKE) -C examples/lambda_project deploy FXDURABLE=$(abspath $(BIN))/fxdurable

# The AWS tests against LocalStack instead of moto (needs Docker): start it, wait until its
# init script has created the queue, table and bucket, run the tests, stop it whatever happened.
LOCALSTACK := docker compose -f localstack/docker-compose.yml
AWS_TESTS := tests/queues/test_sqs_queue.py tests/workers/test_sqs_worker.py \
	tests/workers/test_sqs_crash_suite.py tests/aws_lambda
localstack-test: $(VENV)/.installed
	$(LOCALSTACK) up -d --wait
	FXD_TEST_AWS_ENDPOINT=http://127.0.0.1:4566 scripts/run-tests $(AWS_TESTS) $(PYTEST_ARGS); \
		rc=$$?; $(LOCALSTACK) down; exit $$rc

# The wheel and the sdist in $(DIST)/, checked by twine as an index would. Its own small venv
# (build, twine), not the test environment; the build itself runs in build's isolated env.
BUILD_VENV ?= .venv-build
DIST ?= dist
$(BUILD_VENV)/.installed:
	$(PYTHON) -m venv $(BUILD_VENV)
	$(BUILD_VENV)/bin/python -m pip install -q --upgrade pip
	$(BUILD_VENV)/bin/python -m pip install -q 'build>=1.2' 'twine>=6.1'
	touch $@

wheel: $(BUILD_VENV)/.installed
	rm -f $(DIST)/fxdurable-*.whl $(DIST)/fxdurable-*.tar.gz
	$(BUILD_VENV)/bin/python -m build --wheel --sdist --outdir $(DIST)
	$(BUILD_VENV)/bin/python -m twine check --strict $(DIST)/fxdurable-*.whl $(DIST)/fxdurable-*.tar.gz

clean:
	rm -rf .venv .venv-bench .venv-build dist build site .pytest_cache .mypy_cache .ruff_cache .fxd-demo .fxd-coding
