# Everything runs in a project virtual environment created on first use.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

PATTERN ?= stepwise
POLICY  ?=
BTU     ?=
REPS    ?=
BACKEND ?=
SEED    ?=
OUT     ?=
ARGS    ?=

# Make variables -> Hydra overrides (only those given).
OVERRIDES := pattern=$(PATTERN) \
	$(if $(POLICY),policy=$(POLICY)) \
	$(if $(BTU),billing.btu_minutes=$(BTU)) \
	$(if $(REPS),reps=$(REPS)) \
	$(if $(BACKEND),backend=$(BACKEND)) \
	$(if $(SEED),seed=$(SEED)) \
	$(if $(OUT),out=$(OUT)) \
	$(ARGS)

.PHONY: setup experiment test test-unit bench patterns clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

experiment: $(STAMP)
	$(BIN)/testbed experiment $(OVERRIDES)

patterns: $(STAMP)
	$(BIN)/testbed patterns plot $(or $(OUT),runs)/patterns.png

test: $(STAMP)
	$(BIN)/pytest -q

test-unit: $(STAMP)
	$(BIN)/pytest -q -m "not integration and not live"

bench: $(STAMP)
	$(BIN)/python benchmarks/bench.py

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
