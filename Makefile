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

# pip configured for an index of its own (a mirror, a proxy: pip.conf or PIP_*), which uv
# does not read: then pip installs, as it is told.
PIP_OWN_INDEX = { $(PY) -m pip config list 2>/dev/null; env; } | grep -i -E >/dev/null \
	'(index-url|find-links)|^PIP_(INDEX_URL|EXTRA_INDEX_URL|FIND_LINKS)='

# What `companion` needs to run, nothing more (the test tools are the next target), installed
# by uv, which resolves and fetches the 67 packages at once: 9 s here against pip's 45-55 s,
# one package after the other (pip's cache empty). uv itself is fetched first, with pip, into
# $(VENV)/uv, beside the packages and not one of them (4 s, once). pip installs instead where it
# has an index of its own (above), or when uv fails. Both say what they fetch and install,
# so a first install is never silent. Neither compiles the packages up front: Python
# compiles what a command imports when it first runs (that was half of pip's time).
$(BIN)/companion: pyproject.toml
	@echo "Installing Companion and what it needs to run into $(VENV) (under a minute the first time)..."
	@$(PY) -m venv --without-pip $(VENV)
	@if ! $(PIP_OWN_INDEX) && { [ -x $(VENV)/uv/bin/uv ] || $(PY) -m pip install \
		--disable-pip-version-check --progress-bar on --no-compile --target $(VENV)/uv uv; } && \
		$(VENV)/uv/bin/uv pip install --python $(BIN)/python -e .; \
	then :; else \
		$(VENV_PIP); $$pip install --disable-pip-version-check --progress-bar on --no-compile -e .; \
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
# The rest runs on two workers (pytest-xdist, an embedded Postgres each; the browser tests
# are one group, for one worker). Three full two-worker runs in a row were green on this
# 2-core machine while other work shared it (load 3-7): 7:07, 7:51 and 13:14 for the 1,193
# tests, about 335-370 s of CPU (user+sys) each; one process took 9:59 at load 2-5 (23:17
# at load 6-7). `make test WORKERS=0` runs them in one process. Earlier, on a heavily loaded
# machine (load 10-15), one two-worker run had three tests red that one process passed (a
# 3 s bound on an upload, since made 30 s, and a Traceback in the logs of two real-process
# tests: a Discord shard process redelivering the other's reply, and the SIGKILL campaign
# of tests/test_acknowledged.py), and a `companion chat` in a test was once still running
# after 60 s; none of that came back in the three runs, nor in a fourth after more tests came
# in (1,215 in 5:37 at load 3, 297 s of CPU).
# With workers, the browser's process runs alongside the rest (its output shown when both are
# done): the two workers leave a core idle for much of their run, waiting on Postgres and on
# the processes they start. `make test WORKERS=0` runs the two one after the other. Measured
# so (1,239 tests, Dec 4): 6:45 in all at load 4.5 falling to 0, the browser's 1:09 inside
# it (373 s of CPU), and 8:55 at load 4-7 (342 s); before, at load 3-5, the two workers
# alone took 10:51 (380 s of CPU) and the browser ran after them. At this load, time is CPU shared with other work: most of
# each test's wall time is waiting for a core (Postgres's, the processes it starts).
# Python's compiled modules are written, also where the environment says not to
# (PYTHONDONTWRITEBYTECODE, as on this machine): otherwise every process of the run, each
# worker and each `companion` a test starts, compiles the project's modules from source
# again (collection alone: 9-10 s of CPU per worker instead of 5).
WORKERS ?= 2
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
