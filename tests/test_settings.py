"""Settings from the environment and the model-window table: plain values, no I/O."""

import pytest

from bot.database import asyncpg_url
from bot.settings import Settings
from core.config import EngineConfig, window_for
from core.errors import ConfigError, ContextTooSmall
from core.memory.window import check_window


def test_known_windows_tolerate_prefixes_and_tags():
    assert window_for("gpt-4o-mini") == 128_000
    assert window_for("openai/gpt-4o") == 128_000
    assert window_for("llama3.1:8b-instruct-q4") == 131_072
    assert window_for("gpt-4o-mini-2024-07-18") == 128_000
    assert window_for("my-own-model") is None


def test_window_comes_from_env_then_table_then_fallback():
    assert (
        Settings.from_env({"COMPANION_MODEL": "gpt-4", "COMPANION_CONTEXT_WINDOW": "6000"}).window
        == 6000
    )
    assert Settings.from_env({"COMPANION_MODEL": "gpt-4"}).window == 8192
    assert Settings.from_env({"COMPANION_MODEL": "mystery"}).window == 8192
    # A bigger window than 16k is used only when asked for: each turn would cost that much.
    assert Settings.from_env({"COMPANION_MODEL": "gpt-4o-mini"}).window == 16_384
    assert Settings.from_env({"COMPANION_MODEL": "gpt-4.1"}).window == 16_384
    big = {"COMPANION_MODEL": "gpt-4.1", "COMPANION_CONTEXT_WINDOW": "200000"}
    assert Settings.from_env(big).window == 200_000


def test_missing_model_settings_are_named_in_one_line():
    with pytest.raises(ConfigError) as error:
        Settings.from_env({}).require_model()
    message = str(error.value)
    assert "COMPANION_MODEL" in message and "OPENAI_API_KEY" in message and "\n" not in message
    # A local server needs no key.
    Settings.from_env({"COMPANION_MODEL": "m", "OPENAI_BASE_URL": "http://x/v1"}).require_model()


@pytest.mark.parametrize(
    "env",
    [
        {"COMPANION_CONTEXT_WINDOW": "lots"},
        {"COMPANION_CONTEXT_WINDOW": "-5"},
        {"COMPANION_EMBEDDING_DIM": "1.5"},
        {"COMPANION_DB_SCHEMA": "x; DROP TABLE users"},
        # Past what their use holds: each was "unexpected OverflowError", exit 1, at its
        # first use, or a hint to run `reembed --dim 5000`, which refuses it.
        {"COMPANION_OUTAGE_MINUTES": "9" * 23},
        {"COMPANION_LINK_MINUTES": "9" * 23},
        {"COMPANION_LINK_MINUTES": "6000000000"},
        {"COMPANION_HTTP_PORT": "70000"},
        {"COMPANION_OPS_PORT": "9" * 23},
        {"COMPANION_EMBEDDING_DIM": "5000", "COMPANION_EMBEDDING_MODEL": "text-embedding-3"},
        # Without its scheme every model call failed as an outage: members told the model
        # was down, messages left waiting, exit 1.
        {"OPENAI_BASE_URL": "localhost:11434/v1"},
        {"OPENAI_BASE_URL": "notaurl"},
    ],
)
def test_bad_values_are_clear_errors(env):
    with pytest.raises(ConfigError) as error:
        Settings.from_env(env)
    assert list(env)[0] in str(error.value)


def test_a_window_too_small_for_the_fixed_prompt_is_refused():
    with pytest.raises(ContextTooSmall):
        check_window(EngineConfig(context_window=2048))
    check_window(EngineConfig(context_window=4096, persona_limit=1000, human_limit=1000))
    check_window(EngineConfig(context_window=8192))


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({"SLACK_CLIENT_ID": "1.2"}, ["SLACK_CLIENT_SECRET", "SLACK_SIGNING_SECRET"]),
        (
            {"SLACK_CLIENT_ID": "1.2", "SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": "s"},
            ["SLACK_BOT_TOKEN", "SLACK_CLIENT_ID", "not both"],
        ),
        (
            {
                "SLACK_CLIENT_ID": "1.2",
                "SLACK_CLIENT_SECRET": "c",
                "SLACK_SIGNING_SECRET": "s",
                "SLACK_APP_TOKEN": "xapp-1",
            },
            ["unset SLACK_APP_TOKEN"],
        ),
    ],
)
def test_slack_for_any_workspace_says_what_is_missing_or_contradicts(env, names):
    with pytest.raises(ConfigError) as error:
        Settings.from_env(env).require_platform()
    assert all(name in str(error.value) for name in names), error.value


def test_slack_for_any_workspace_is_http_mode():
    env = {"SLACK_CLIENT_ID": "1.2", "SLACK_CLIENT_SECRET": "c", "SLACK_SIGNING_SECRET": "s"}
    settings = Settings.from_env(env)
    settings.require_platform()
    assert settings.slack_oauth and settings.slack_over_http
    assert not Settings.from_env({"SLACK_BOT_TOKEN": "x", "SLACK_APP_TOKEN": "y"}).slack_oauth


@pytest.mark.parametrize(
    "url", ["postgresql://x@127.0.0.1:99999999/db", "postgresql://[::1", "postgres://u@h:abc/d"]
)
def test_a_database_url_that_cannot_be_connected_to_is_a_setting_to_fix(url):
    """Each was "unexpected OverflowError" or "unexpected ValueError" at connect time."""
    with pytest.raises(ConfigError) as error:
        asyncpg_url(url)
    assert str(error.value).startswith("DATABASE_URL cannot be used: ")
