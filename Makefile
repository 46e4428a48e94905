# Everything runs in a project virtual environment created on first use.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The versions CI tested (pip freeze of the tested venv, the project itself left out): `make setup`
# installs exactly these; `make constraints` refreshes the file. CONSTRAINTS= installs unpinned.
CONSTRAINTS ?= constraints.txt

# EVAL: an evaluation (testbed evaluations lists them; default btu); WORKLOAD (or PATTERN): one of its
# workloads, default the evaluation's first.
EVAL    ?=
WORKLOAD ?= $(PATTERN)
PATTERN ?=
POLICY  ?=
BTU     ?=
REPS    ?=
BACKEND ?=
SEED    ?=
OUT     ?=
DURATION ?=
SCALE   ?=
ARGS    ?=
# `make report`: the runs folder to report (default: the pattern's folder) and report overrides,
# e.g. REPORT_ARGS="spark.master=spark://host:7077 out=/tmp/report"
RUNS        ?= $(or $(OUT),runs)/$(or $(WORKLOAD),stepwise)
REPORT_ARGS ?=

# Make variables -> Hydra overrides (only those given).
OVERRIDES := $(if $(EVAL),evaluation=$(EVAL)) \
	$(if $(WORKLOAD),pattern=$(WORKLOAD)) \
	$(if $(POLICY),policy=$(POLICY)) \
	$(if $(BTU),billing.btu_minutes=$(BTU)) \
	$(if $(REPS),reps=$(REPS)) \
	$(if $(BACKEND),backend=$(BACKEND)) \
	$(if $(SEED),seed=$(SEED)) \
	$(if $(OUT),out=$(OUT)) \
	$(if $(DURATION),duration_min=$(DURATION)) \
	$(if $(SCALE),load_scale=$(SCALE)) \
	$(ARGS)

.PHONY: setup constraints experiment report test test-unit lint bench patterns clean infra-up infra-down images flink flink-test flink-bench flink-ramp

setup: $(STAMP)

$(STAMP): pyproject.toml $(CONSTRAINTS)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet $(if $(CONSTRAINTS),-c $(CONSTRAINTS)) -e '.[test]'
	touch $(STAMP)

# Refresh constraints.txt: resolve pyproject.toml's ranges afresh (newest allowed versions) in a
# scratch venv and freeze it; `make setup` then reinstalls .venv from the new file, and `make test`
# checks it before the file is committed.
constraints:
	@set -e; tmp=$$(mktemp -d /tmp/testbed-constraints.XXXXXX); trap 'rm -rf "$$tmp"' EXIT; \
	  echo "resolving pyproject.toml afresh in a scratch venv ($$tmp; a few minutes)…"; \
	  $(PYTHON) -m venv "$$tmp"; \
	  "$$tmp/bin/pip" install --quiet --upgrade pip; \
	  "$$tmp/bin/pip" install --quiet -e '.[test]'; \
	  { echo "# The versions make setup installs (pip install -c): pip freeze of a venv with .[test] installed."; \
	    echo "# Refresh: make constraints (the newest versions pyproject.toml allows), then make test; commit."; \
	    "$$tmp/bin/pip" freeze --exclude-editable; } > $(or $(CONSTRAINTS),constraints.txt); \
	  echo "wrote $(or $(CONSTRAINTS),constraints.txt); make setup reinstalls $(VENV) from it"

# a live evaluation (backend docker) first installs and starts the broker, Redis and dockerd, and
# builds the operator images; one on Flink (backend flink) installs Flink and builds its job (each
# step idempotent, quick when done already). The scripts say on
# stderr what they do, one line per step (nothing when it is done already); their status lines on
# stdout are dropped here.
experiment: $(STAMP)
	@if [ "$(BACKEND)" = docker ] || [ "$$($(BIN)/testbed evaluations $(or $(EVAL),btu) backend)" = docker ]; then \
	  bash infra/services.sh install >/dev/null && bash infra/services.sh start >/dev/null && \
	  bash infra/docker.sh start >/dev/null && PROVIDER=0 bash infra/images.sh >/dev/null; fi
	@if [ "$(BACKEND)" = flink ] || [ "$$($(BIN)/testbed evaluations $(or $(EVAL),btu) backend)" = flink ]; then \
	  bash infra/flink.sh build >/dev/null; fi
	$(BIN)/testbed experiment $(OVERRIDES)
	$(BIN)/testbed report $(or $(OUT),runs)/$(or $(WORKLOAD),$$($(BIN)/testbed evaluations $(or $(EVAL),btu) workload)) $(REPORT_ARGS)

report: $(STAMP)
	$(BIN)/testbed report $(RUNS) $(REPORT_ARGS)

patterns: $(STAMP)
	$(BIN)/testbed patterns plot $(or $(OUT),runs)/patterns.png

# The integration and live tests use the project's services: installed (Debian packages) and started
# here, idempotently (quick when they run already). Tests run on TEST_WORKERS processes (default: one
# per core): each of the two integration lanes in order on one of them (tests/conftest.py), the rest on
# the others. One worker more than cores was tried: no shorter on two cores (39 min either way), and the
# load it adds made timing-sensitive live checks fail. TEST_WORKERS=0 runs everything in this process.
TEST_WORKERS ?= auto
UNIT_WORKERS := $(TEST_WORKERS)
test: $(STAMP)
	bash infra/services.sh install >/dev/null && bash infra/services.sh start >/dev/null
	bash infra/docker.sh start >/dev/null
	$(BIN)/pytest -q -n $(TEST_WORKERS) --durations=25  # the slowest, to keep CI inside its limit

# the quick part (about a minute): no services, no simulations of whole runs, no subprocesses, no JVM
# or browser (markers integration, live, slow; pyproject.toml); `make test` runs everything
test-unit: $(STAMP)
	$(BIN)/pytest -q -n $(UNIT_WORKERS) -m "not integration and not live and not slow"

# Apache Flink for the job mode (docs/flink.md): install it from PyPI into .flink/ and build the
# WordCount job. flink-test runs the engine's integration tests alone (make test runs them too);
# both it and the measurements take /tmp/testbed-flink.lock (one cluster at a time on the machine).
flink:
	bash infra/flink.sh build

flink-test: $(STAMP) flink
	flock /tmp/testbed-flink.lock $(BIN)/pytest -q tests/integration/test_flink_engine.py tests/integration/test_flink_jobs.py

flink-bench: $(STAMP) flink
	flock /tmp/testbed-flink.lock $(BIN)/python benchmarks/bench_flink.py

# the load ramp (docs/flink.md#the-load-ramp): RAMP_RUNS runs of one cpu-mode TaskManager from 20 to
# 140 % of its capacity (about 6 min each, one cluster at a time, each a measurement), then the job
# model on the same ramp fitted to them; the runs' JSON files go to RAMP_OUT
RAMP_RUNS ?= 2
RAMP_OUT ?= runs/ramp
flink-ramp: $(STAMP) flink
	mkdir -p $(RAMP_OUT)
	for i in $$(seq 1 $(RAMP_RUNS)); do \
	  flock /tmp/testbed-flink.lock flock /tmp/testbed-measure.lock \
	    $(BIN)/python benchmarks/flink_ramp.py --out $(RAMP_OUT)/flink-$$i.json || exit 1; sleep 20; done
	$(BIN)/python benchmarks/ramp_compare.py $(RAMP_OUT)/flink-*.json --fit --out $(RAMP_OUT)/compare.json

# the code checks (pyproject.toml: [tool.ruff], [tool.mypy]): ruff over the repository, mypy over the
# production packages; tests/unit/test_code_quality.py runs the same (a slow test)
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python benchmarks/bench.py
	$(BIN)/python benchmarks/bench_report.py
	$(BIN)/python benchmarks/bench_sweep.py
	bash infra/services.sh start >/dev/null
	$(BIN)/python benchmarks/bench_provider.py
	$(BIN)/python benchmarks/bench_runner.py
	$(BIN)/python benchmarks/bench_ocr.py
	$(BIN)/python benchmarks/bench_cpu_time.py
	$(BIN)/python benchmarks/bench_live.py

# Container images: the provider and one image per operator type (testbed-o1 ... testbed-o9), then a
# table of their sizes (infra/images.sh). IMAGE_BASE: the official python slim image where it is
# present (or pullable: `make images IMAGE_BASE=python:3.11-slim`), else a Debian base made by
# infra/base-image.sh (debootstrap) if missing.
IMAGE_BASE ?= $(shell docker image inspect python:3.11-slim >/dev/null 2>&1 && echo python:3.11-slim || echo testbed-base:bookworm)

images:
	bash infra/images.sh $(IMAGE_BASE)

# Local services of the live testbed (RabbitMQ with management, Redis, tesseract): install + start / stop.
# INFRA=compose: RabbitMQ, Redis and Kafka from docker-compose.yml instead (official images);
# add COMPOSE_BUILD=1 [BASE=testbed-base:bookworm] to build them from a local base (no registry).
INFRA ?= host

infra-up:
ifeq ($(INFRA),compose)
	bash infra/compose.sh up
else
	bash infra/services.sh install
	bash infra/services.sh start
endif

# stops what the project started (pid files, see infra/services.sh and infra/docker.sh): RabbitMQ
# with the epmd its install or start brought up, Redis and dockerd; services that ran already are left running
infra-down:
ifeq ($(INFRA),compose)
	bash infra/compose.sh down
else
	bash infra/services.sh stop
endif
	bash infra/docker.sh stop

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
