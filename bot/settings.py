"""Settings from the environment and `.env`; the only module that reads either.

Sandbox limits are `CELLMATE_SANDBOX_<FIELD>` for every field of `SandboxLimits`
(e.g. `CELLMATE_SANDBOX_MEMORY_MB=2048`, `CELLMATE_SANDBOX_RUNTIME=runsc`).
"""

from __future__ import annotations

import dataclasses
import os
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dotenv import dotenv_values

from executor.image import default_tag
from executor.limits import SandboxLimits

SANDBOX_PREFIX = "CELLMATE_SANDBOX_"
TRUE = {"1", "true", "yes", "on"}
FALSE = {"0", "false", "no", "off", ""}


class SettingsError(ValueError):
    """A setting has a value that cannot be used; the message names it."""


@dataclass(frozen=True, slots=True)
class Settings:
    sandbox: SandboxLimits = field(default_factory=SandboxLimits)
    sandbox_image: str = ""
    """Image for sandboxes; by default the content-hash tag of environments/jupyter."""
    instance: str = "default"
    """Label of this bot's sandboxes, so that start-up clean-up spares other instances."""
    data_dir: Path = Path(".data")
    debian_mirror: str = "http://deb.debian.org/debian"

    @property
    def image(self) -> str:
        return self.sandbox_image or default_tag()


def load_settings(
    environ: Mapping[str, str] | None = None, env_file: Path | None = Path(".env")
) -> Settings:
    """Settings from `environ` (the process environment by default) over the `.env` file."""
    values: dict[str, str] = {}
    if env_file is not None and env_file.is_file():
        values.update({k: v for k, v in dotenv_values(env_file).items() if v is not None})
    values.update(os.environ if environ is None else environ)
    sandbox = _sandbox_limits(values)
    try:
        return Settings(
            sandbox=sandbox,
            sandbox_image=values.get("CELLMATE_SANDBOX_IMAGE", ""),
            instance=values.get("CELLMATE_INSTANCE", "default") or "default",
            data_dir=Path(values.get("CELLMATE_DATA_DIR", ".data") or ".data"),
            debian_mirror=values.get("CELLMATE_DEBIAN_MIRROR", "")
            or "http://deb.debian.org/debian",
        )
    except ValueError as exc:
        raise SettingsError(str(exc)) from exc


def _sandbox_limits(values: Mapping[str, str]) -> SandboxLimits:
    hints = typing.get_type_hints(SandboxLimits)
    given: dict[str, Any] = {}
    for limit in dataclasses.fields(SandboxLimits):
        name = SANDBOX_PREFIX + limit.name.upper()
        if name in values:
            given[limit.name] = _parse(name, values[name].strip(), hints[limit.name])
    try:
        return SandboxLimits(**given)
    except ValueError as exc:
        raise SettingsError(f"{exc} (check the CELLMATE_SANDBOX_* settings)") from exc


def _parse(name: str, raw: str, kind: Any) -> Any:
    if kind is bool:
        if raw.lower() in TRUE:
            return True
        if raw.lower() in FALSE:
            return False
        raise SettingsError(f"{name} must be true or false, got {raw!r}")
    if kind is int:
        try:
            return int(raw)
        except ValueError:
            raise SettingsError(f"{name} must be a whole number, got {raw!r}") from None
    if kind is float:
        try:
            return float(raw)
        except ValueError:
            raise SettingsError(f"{name} must be a number, got {raw!r}") from None
    allowed = typing.get_args(kind)
    if allowed and raw not in allowed:
        raise SettingsError(f"{name} must be one of {', '.join(allowed)}, got {raw!r}")
    return raw
