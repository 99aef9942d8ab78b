# benchmaker: every target installs what it needs into .venv first (Python >= 3.11).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install test demo demo-llm bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q

# Engine demo: `benchmaker llm` against a scripted local OpenAI-compatible server.
demo-llm: $(STAMP)
	$(PY) examples/llm_demo.py

# Speed and memory figures (printed; not part of CI).
bench: $(STAMP)
	$(PY) benchmarks/engine.py

clean:
	rm -rf $(VENV) artifacts runs
