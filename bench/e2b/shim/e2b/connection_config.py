"""`e2b.connection_config`: the settings object; Cellmate's sandboxes need none of them."""

from typing import Any


class ConnectionConfig:
    def __init__(self, **settings: Any) -> None:
        self.settings = settings
        self.request_timeout: float | None = settings.get("request_timeout")
        self.domain: str | None = settings.get("domain")
        self.api_key: str | None = settings.get("api_key")
