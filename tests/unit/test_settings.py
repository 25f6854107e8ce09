from __future__ import annotations

from pathlib import Path

import pytest

from bot.settings import SettingsError, load_settings
from executor.image import default_tag


def test_defaults_are_the_safe_ones() -> None:
    settings = load_settings({}, env_file=None)
    limits = settings.sandbox
    assert (limits.memory_mb, limits.cpus, limits.timeout_s, limits.output_bytes) == (
        1024,
        1.0,
        60.0,
        1_000_000,
    )
    assert limits.network is False
    assert limits.runtime == "runc"
    assert settings.image == default_tag()


def test_environment_overrides_the_env_file(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("CELLMATE_SANDBOX_MEMORY_MB=2048\nCELLMATE_SANDBOX_RUNTIME=runsc\n")
    settings = load_settings(
        {"CELLMATE_SANDBOX_MEMORY_MB": "512", "CELLMATE_SANDBOX_NETWORK": "no"}, env_file
    )
    assert settings.sandbox.memory_mb == 512
    assert settings.sandbox.runtime == "runsc"
    assert settings.sandbox.network is False


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("CELLMATE_SANDBOX_MEMORY_MB", "lots", "must be a whole number"),
        ("CELLMATE_SANDBOX_CPUS", "two", "must be a number"),
        ("CELLMATE_SANDBOX_NETWORK", "maybe", "must be true or false"),
        ("CELLMATE_SANDBOX_RUNTIME", "kata", "must be one of runc, runsc"),
        ("CELLMATE_SANDBOX_TIMEOUT_S", "0", "timeout_s must be positive"),
        ("CELLMATE_SANDBOX_MEMORY_MB", "64", "at least 128"),
    ],
)
def test_bad_values_name_the_setting(name: str, value: str, message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        load_settings({name: value}, env_file=None)


def test_network_cannot_be_enabled_under_runsc() -> None:
    with pytest.raises(SettingsError, match="not available under runsc"):
        load_settings(
            {"CELLMATE_SANDBOX_NETWORK": "true", "CELLMATE_SANDBOX_RUNTIME": "runsc"}, env_file=None
        )


def test_pool_settings() -> None:
    settings = load_settings(
        {
            "CELLMATE_POOL_SIZE": "4",
            "CELLMATE_POOL_MAX_LIVE": "40",
            "CELLMATE_POOL_IDLE_TIMEOUT_S": "60",
        },
        env_file=None,
    )
    assert (settings.pool.size, settings.pool.max_live, settings.pool.idle_timeout_s) == (
        4,
        40,
        60.0,
    )
    assert load_settings({}, env_file=None).pool.size == 2
    with pytest.raises(SettingsError, match="CELLMATE_POOL_"):
        load_settings({"CELLMATE_POOL_MAX_LIVE": "0"}, env_file=None)
