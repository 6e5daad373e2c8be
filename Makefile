# Everyday commands. `make chat` and `make test` are the two a newcomer needs.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: chat dev test lint format bench

# pip for the venv: the interpreter's own pip, pointed at it (`--python`, pip 22.3+), so the
# venv is made without a pip of its own (ensurepip installs and compiles one: 7-14 s of a
# first `make chat` here); one is installed into it only where the interpreter has none.
VENV_PIP = pip="$(PY) -m pip --python $(BIN)/python"; $$pip --version >/dev/null 2>&1 || \
	{ $(BIN)/python -m ensurepip --default-pip >/dev/null && pip="$(BIN)/python -m pip"; }

# What `companion` needs to run, nothing more (the test tools are the next target), installed
# by uv, which resolves and fetches the 67 packages at once: 9 s here against pip's 45-55 s,
# one package after the other (pip's cache empty). uv itself is fetched first, with pip, into
# $(VENV)/uv, beside the packages and not one of them (4 s, once). uv is told the index pip is
# configured with (a mirror, a proxy, a directory of wheels: deploy/uv_pip_install.py); pip
# installs instead when uv fails. Both say what they fetch and install, so a first install is
# never silent. Neither compiles the packages up front: Python compiles what a command imports
# when it first runs (that was half of pip's time), unless the environment says not to
# (PYTHONDONTWRITEBYTECODE, as on this machine): then every command would compile its modules
# anew (a piped chat's reply 2.5 s instead of 1.3 here), so they are compiled once, here, in
# parallel (about 10 s of CPU).
$(BIN)/companion: pyproject.toml
	@echo "Installing Companion and what it needs to run into $(VENV) (under a minute the first time)..."
	@$(PY) -m venv --without-pip $(VENV)
	@if { [ -x $(VENV)/uv/bin/uv ] || $(PY) -m pip install --disable-pip-version-check \
		--progress-bar on --no-compile --target $(VENV)/uv uv; } && \
		$(PY) deploy/uv_pip_install.py $(VENV)/uv/bin/uv --python $(BIN)/python -e .; \
	then :; else \
		$(VENV_PIP); $$pip install --disable-pip-version-check --progress-bar on --no-compile -e .; \
	fi
	@if [ -n "$$PYTHONDONTWRITEBYTECODE" ]; then \
		echo "Compiling the installed modules once (PYTHONDONTWRITEBYTECODE is set, so commands would not)..."; \
		PYTHONDONTWRITEBYTECODE= $(BIN)/python -m compileall -q -j0 bot core adapters migrations \
			"$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" >/dev/null || :; \
	fi
	@echo "Installed. Next time this step is skipped."
	@touch $@

# The test and lint tools (pytest, ruff, mypy, Playwright...): `make test`, `make lint` and CI.
$(BIN)/pytest: $(BIN)/companion
	@echo "Installing the test and lint tools into $(VENV)..."
	@$(VENV_PIP); $$pip install --disable-pip-version-check --progress-bar on -e '.[dev]'
	@touch $@

dev: $(BIN)/pytest  ## install Companion with the test and lint tools

chat: $(BIN)/companion  ## install (runtime only), then chat with your own agent (embedded database)
	$(BIN)/companion chat

# The browser tests run in a process of their own: in one process with the whole suite,
# headless Chromium has twice stopped answering Playwright mid-test, and once in CI on its
# own. They share one Chromium; a test whose Chromium stops answering runs again once in a
# new one (tests/test_browser.py); no test may take over 10 minutes (pyproject.toml).
# The rest runs on three workers (pytest-xdist, an embedded Postgres each; the browser tests
# are one group, for one worker), the browser's process alongside them (its output shown
# when both are done): the workers wait on Postgres and on the processes they start, so a
# third one fills the cores the first two leave idle. Measured on this 2-core machine,
# one run after another with nothing else running, Dec 4 evening (1,265 tests + 14 in the
# browser; CPU: everything the run started, Postgres included): two workers 3:38 (321 s of
# CPU), three 3:14-3:20 (339-352 s), four 3:17 (364 s). `make test WORKERS=0`
# runs everything in one process, the browser's after.
# Python's compiled modules are written, also where the environment says not to
# (PYTHONDONTWRITEBYTECODE, as on this machine): otherwise every process of the run, each
# worker and each `companion` a test starts, compiles the project's modules from source
# again (collection alone: 9-10 s of CPU per worker instead of 5).
WORKERS ?= 3
test: export PYTHONDONTWRITEBYTECODE =
test: $(BIN)/pytest  ## install with the test tools, then run the whole test suite
	@if [ "$(WORKERS)" = 0 ]; then \
		$(BIN)/pytest -n 0 --ignore=tests/test_browser.py && $(BIN)/pytest tests/test_browser.py; \
	else \
		browser_log=$$(mktemp); \
		$(BIN)/pytest tests/test_browser.py >"$$browser_log" 2>&1 & browser=$$!; \
		trap 'kill $$browser 2>/dev/null' INT TERM; \
		echo "tests/test_browser.py runs alongside (pid $$browser); its output comes at the end"; \
		$(BIN)/pytest -n $(WORKERS) --dist loadgroup --ignore=tests/test_browser.py; rest=$$?; \
		wait $$browser; browser_rc=$$?; \
		echo "--- tests/test_browser.py (ran alongside) ---"; cat "$$browser_log"; rm -f "$$browser_log"; \
		[ $$rest = 0 ] && [ $$browser_rc = 0 ]; \
	fi

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
