from __future__ import annotations

from pathlib import Path

import pytest

from bot.settings import SettingsError, load_settings
from executor.docker_backend import DockerBackend
from executor.image import default_tag
from executor.kubernetes_backend import KubernetesBackend


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
        ("CELLMATE_SANDBOX_PRELOAD", "numpy,scipy", "names scipy: use auto, none, or some of"),
        ("CELLMATE_SANDBOX_PRELOAD", "os; import x", "names os; import x"),
    ],
)
def test_bad_values_name_the_setting(name: str, value: str, message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        load_settings({name: value}, env_file=None)


@pytest.mark.parametrize(
    ("values", "preloaded"),
    [
        ({}, ("numpy", "pandas", "matplotlib")),
        ({"CELLMATE_SANDBOX_RUNTIME": "runsc"}, ("numpy", "matplotlib")),
        ({"CELLMATE_SANDBOX_PRELOAD": "none"}, ()),
        ({"CELLMATE_SANDBOX_PRELOAD": " matplotlib , pandas "}, ("pandas", "matplotlib")),
        (
            {"CELLMATE_SANDBOX_RUNTIME": "runsc", "CELLMATE_SANDBOX_PRELOAD": "pandas"},
            ("pandas",),
        ),
    ],
)
def test_what_new_sandboxes_preload(values: dict[str, str], preloaded: tuple[str, ...]) -> None:
    limits = load_settings(values, env_file=None).sandbox
    assert limits.preloaded() == preloaded
    # Sandboxes that preload differently are not interchangeable in the pool.
    assert preloaded in limits.container_spec()


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


def test_storage_is_local_unless_azure_is_configured(tmp_path: Path) -> None:
    from bot.ops.storage_setup import build_storage
    from storage.azure_blob import AzureBlobStorage
    from storage.local import LocalStorage

    local = load_settings({"CELLMATE_DATA_DIR": str(tmp_path)}, env_file=None)
    assert isinstance(build_storage(local), LocalStorage)
    azure = load_settings(
        {
            "AZURE_STORAGE_CONNECTION_STRING": "DefaultEndpointsProtocol=https;AccountName=acct;"
            "AccountKey=" + "A" * 86 + "==;EndpointSuffix=core.windows.net",
            "AZURE_BLOB_CONTAINER_NAME": "charts",
            "CELLMATE_STORAGE_LINK_EXPIRY_DAYS": "2",
        },
        env_file=None,
    )
    store = build_storage(azure)
    assert isinstance(store, AzureBlobStorage)
    assert store.container == "charts"
    assert store.default_expiry.days == 2
    with pytest.raises(SettingsError, match="public_base_url must start with http"):
        load_settings({"CELLMATE_STORAGE_PUBLIC_BASE_URL": "ftp://x"}, env_file=None)
    with pytest.raises(
        SettingsError, match="CELLMATE_STORAGE_BACKEND must be one of auto, local, azure"
    ):
        load_settings({"CELLMATE_STORAGE_BACKEND": "s3"}, env_file=None)


def test_env_example_lists_every_setting_and_loads() -> None:
    import dataclasses

    from bot.settings import (
        DISCORD_PREFIX,
        KUBERNETES_PREFIX,
        NETWORK_NAMES,
        POOL_PREFIX,
        QUOTA_PREFIX,
        SANDBOX_PREFIX,
        SESSION_NAMES,
        SLACK_PREFIX,
        STORAGE_PREFIX,
        DiscordSettings,
        QuotaSettings,
        SlackSettings,
        StorageSettings,
    )
    from executor.executor import PoolSettings
    from executor.kubernetes_backend import KubernetesSettings
    from executor.limits import SandboxLimits

    example = Path(__file__).resolve().parents[2] / ".env.example"
    text = example.read_text()
    for prefix, section in (
        (SANDBOX_PREFIX, SandboxLimits),
        (POOL_PREFIX, PoolSettings),
        (STORAGE_PREFIX, StorageSettings),
        (DISCORD_PREFIX, DiscordSettings),
        (SLACK_PREFIX, SlackSettings),
        (QUOTA_PREFIX, QuotaSettings),
        (KUBERNETES_PREFIX, KubernetesSettings),
    ):
        for item in dataclasses.fields(section):
            if item.name in ("token", "api_url", "bot_token", "app_token", "signing_secret"):
                continue  # the platforms' own names, checked below
            if item.metadata.get("derived"):
                continue  # not a setting: the bot derives it
            if section is SandboxLimits and item.name in NETWORK_NAMES:
                assert NETWORK_NAMES[item.name] in text, item.name
                continue
            if section is PoolSettings and item.name in SESSION_NAMES:
                assert SESSION_NAMES[item.name] in text, item.name
                continue
            assert prefix + item.name.upper() in text, item.name
    for name in (
        "CELLMATE_SANDBOX_IMAGE",
        "CELLMATE_EXECUTOR_BACKEND",
        "CELLMATE_INSTANCE",
        "CELLMATE_DATA_DIR",
        "CELLMATE_DATABASE_URL",
        "CELLMATE_HTTP_PORT",
        "AZURE_BLOB_CONTAINER_NAME",
        "DISCORD_TOKEN",
        "DISCORD_API_URL",
        "SLACK_BOT_TOKEN",
        "SLACK_APP_TOKEN",
        "SLACK_SIGNING_SECRET",
        "SLACK_API_URL",
        "CELLMATE_ADMINS",
        "CELLMATE_SHUTDOWN_GRACE_S",
        "CELLMATE_LOG_FORMAT",
        "CELLMATE_LOG_LEVEL",
    ):
        assert name in text
    assert load_settings({}, env_file=example).sandbox.memory_mb == 1024


def test_a_session_secret_keeps_sessions_on_docker_and_kubernetes() -> None:
    plain = load_settings({}, env_file=None)
    assert plain.sandbox_backend() is None  # the executor's own Docker backend: none kept
    secret = "s" * 64
    docker = load_settings({"CELLMATE_SESSION_SECRET": secret}, env_file=None)
    backend = docker.sandbox_backend()
    assert isinstance(backend, DockerBackend)
    assert backend.keeps_sessions
    # The key of a container is the secret's: a process with another one cannot make it.
    other = DockerBackend("image", session_secret="t" * 64)
    assert backend.key_for("cellmate-0123") == DockerBackend("x", session_secret=secret).key_for(
        "cellmate-0123"
    )
    assert backend.key_for("cellmate-0123") != other.key_for("cellmate-0123")
    assert backend.key_for("cellmate-0123") != backend.key_for("cellmate-0124")
    assert not DockerBackend("image").keeps_sessions
    assert secret in docker.secrets  # never logged
    cluster = load_settings(
        {
            "CELLMATE_SESSION_SECRET": secret,
            "CELLMATE_EXECUTOR_BACKEND": "kubernetes",
            "CELLMATE_SANDBOX_RUNTIME": "runsc",
        },
        env_file=None,
    )
    pods = cluster.sandbox_backend()
    assert isinstance(pods, KubernetesBackend)
    assert pods.keeps_sessions


def test_the_database_url_is_sqlite_when_empty_and_its_password_is_secret() -> None:
    assert load_settings({}, env_file=None).database_url == ""
    url = "postgresql://bot:s3cret-pw@db.internal:5432/cellmate"
    settings = load_settings({"CELLMATE_DATABASE_URL": url}, env_file=None)
    assert settings.database_url == url
    assert "s3cret-pw" in settings.secrets
    assert "s3cret-pw" not in repr(settings)
    with pytest.raises(SettingsError, match="CELLMATE_DATABASE_URL must be empty"):
        load_settings({"CELLMATE_DATABASE_URL": "mysql://x@y/z"}, env_file=None)
