# Everyday commands. `make chat` and `make test` are the two a newcomer needs.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: chat test lint format bench

$(BIN)/companion: pyproject.toml
	@echo "Installing Companion and its dependencies into $(VENV) (first time: about a minute)..."
	@$(PY) -m venv $(VENV)
	@$(BIN)/python -m pip install -q --upgrade pip
	@$(BIN)/python -m pip install -q --progress-bar on -e '.[dev]'
	@echo "Installed. Next time this step is skipped."
	@touch $@

chat: $(BIN)/companion  ## install, then chat with your own agent (embedded database)
	$(BIN)/companion chat

# The browser tests run in a process of their own: in one process with the whole suite,
# headless Chromium has twice stopped answering Playwright mid-test, and once in CI on its
# own. Each browser test has its own Chromium and runs again once if that one stops
# answering (tests/test_browser.py); no test may take over 10 minutes (pyproject.toml).
# One process: `pytest -n 2` (pytest-xdist, an embedded Postgres per worker) takes 7 minutes
# on 2 cores where one process takes 13, but once under two workers a `companion chat` in a
# test was still running after 60 s (not reproduced since); CI keeps the proven way.
test: $(BIN)/companion  ## install, then run the whole test suite
	$(BIN)/pytest --ignore=tests/test_browser.py
	$(BIN)/pytest tests/test_browser.py

lint: $(BIN)/companion
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: $(BIN)/companion
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: $(BIN)/companion
	$(BIN)/python bench/framework.py
	$(BIN)/python bench/search.py --dim 384
	$(BIN)/python bench/locomo_recall.py
