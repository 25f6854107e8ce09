"""Building the artifact store the settings ask for."""

from __future__ import annotations

import os
import secrets
from datetime import timedelta
from pathlib import Path

from bot.settings import Settings
from storage.azure_blob import AzureBlobStorage
from storage.base import Storage
from storage.local import LocalStorage
from storage.stable_links import StableLinks


def build_storage(settings: Settings) -> Storage:
    """Azure Blob when configured (or asked for), local files under the data directory
    otherwise; with stable links when the bot has a public address."""
    inner = _build_store(settings)
    bot_url = settings.storage.bot_url
    if not bot_url and isinstance(inner, LocalStorage) and inner.base_url:
        bot_url = inner.base_url  # local files are served by the bot itself
    if not bot_url:
        return inner
    return StableLinks(inner, link_secret(settings), bot_url)


def _build_store(settings: Settings) -> Storage:
    chosen = settings.storage
    expiry = timedelta(days=chosen.link_expiry_days)
    use_azure = chosen.backend == "azure" or (
        chosen.backend == "auto" and settings.azure.configured
    )
    if use_azure:
        azure = settings.azure
        return AzureBlobStorage(
            container=azure.container,
            connection_string=azure.connection_string or None,
            account_name=azure.account_name or None,
            account_key=azure.account_key or None,
            public_base_url=chosen.public_base_url or None,
            default_expiry=expiry,
        )
    return LocalStorage(
        settings.data_dir / "files",
        link_secret(settings),
        base_url=chosen.public_base_url or None,
        default_expiry=expiry,
    )


def link_secret(settings: Settings) -> bytes:
    """The configured secret, or one made once and kept (owner-only) in the data directory."""
    if settings.storage.link_secret:
        return settings.storage.link_secret.encode()
    path = settings.data_dir / "link-secret"
    if not path.exists():
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process made it first
            pass
        else:
            with os.fdopen(descriptor, "w") as file:
                file.write(secrets.token_hex(32))
    return Path(path).read_text().strip().encode()
