# gpumem: the two commands a fresh machine needs are `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_BUNDLE ?= examples/runbook-incident

.PHONY: demo test lint unit bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,charts]'
	touch $(STAMP)

## Set up and run a real triage on the bundled runbook incident (exit 1 = a cause was found).
demo: $(STAMP)
	@$(BIN)/gpumem triage --bundle $(DEMO_BUNDLE) --lang $${GPUMEM_LANG:-en}; rc=$$?; [ $$rc -le 1 ]

## Set up and run everything CI runs: lint, layer contracts, the whole test suite.
test: $(STAMP) lint
	$(BIN)/pytest

lint: $(STAMP)
	$(BIN)/ruff check bot collectors runbooks tests benchmarks
	$(BIN)/lint-imports

bench: $(STAMP)
	$(BIN)/python -m benchmarks.run

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
