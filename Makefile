# Everyday commands. `make chat` and `make test` are the two a newcomer needs.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: chat dev test lint format bench

# What `companion` needs to run, nothing more (the test tools are the next target). pip
# says what it fetches and installs, package by package, so a first install is never silent.
# --no-compile: Python compiles what a command imports when it first runs, not all 60
# packages up front (that was half of the install's time).
$(BIN)/companion: pyproject.toml
	@echo "Installing Companion and what it needs to run into $(VENV) (about a minute the first time)..."
	@$(PY) -m venv $(VENV)
	@$(BIN)/python -m pip install --disable-pip-version-check --progress-bar on --no-compile -e .
	@echo "Installed. Next time this step is skipped."
	@touch $@

# The test and lint tools (pytest, ruff, mypy, Playwright...): `make test`, `make lint` and CI.
$(BIN)/pytest: $(BIN)/companion
	@echo "Installing the test and lint tools into $(VENV)..."
	@$(BIN)/python -m pip install --disable-pip-version-check --progress-bar on -e '.[dev]'
	@touch $@

dev: $(BIN)/pytest  ## install Companion with the test and lint tools

chat: $(BIN)/companion  ## install (runtime only), then chat with your own agent (embedded database)
	$(BIN)/companion chat

# Two workers (pytest-xdist), each with its own embedded Postgres: the suite's tests wait on
# processes, sockets and the database as much as they compute, so two share 2 cores well.
# The browser tests are one group on one worker, beside the rest, in one Chromium
# (tests/test_browser.py); a browser test whose Chromium stops answering runs once more in a
# new one (it did, twice, when the browser tests shared a process with the whole suite), and
# nothing else is ever run again. No test may take over 10 minutes (pyproject.toml).
# `make test WORKERS=0` runs everything in this one process.
WORKERS ?= 2
test: $(BIN)/pytest  ## install with the test tools, then run the whole test suite
	$(BIN)/pytest -n $(WORKERS) --dist loadgroup

lint: $(BIN)/pytest
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: $(BIN)/pytest
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: $(BIN)/pytest
	$(BIN)/python bench/framework.py
	$(BIN)/python bench/search.py --dim 384
	$(BIN)/python bench/locomo_recall.py
