# The two commands: `make run` opens the editor on the demo model, `make test` runs the suite.
# Both create .venv when missing and install the project with its test extras (idempotent).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test bench lint clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/npu-studio

test: $(STAMP)
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -q tests

bench: $(STAMP)
	for f in tests/bench/bench_*.py; do m=$$(basename $$f .py); echo "== $$m"; \
	  QT_QPA_PLATFORM=offscreen $(BIN)/python -m tests.bench.$$m || exit 1; done

lint: $(STAMP)
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) build *.egg-info
