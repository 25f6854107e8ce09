"""Settings from the environment and `.env`; the only module that reads either.

Sandbox limits are `CELLMATE_SANDBOX_<FIELD>` for every field of `SandboxLimits`
(e.g. `CELLMATE_SANDBOX_MEMORY_MB=2048`, `CELLMATE_SANDBOX_RUNTIME=runsc`); the pool and
sessions are `CELLMATE_POOL_<FIELD>` for every field of `PoolSettings`.
"""

from __future__ import annotations

import dataclasses
import os
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from dotenv import dotenv_values

from executor.executor import PoolSettings
from executor.image import default_tag
from executor.limits import SandboxLimits

SANDBOX_PREFIX = "CELLMATE_SANDBOX_"
POOL_PREFIX = "CELLMATE_POOL_"
T = TypeVar("T")
TRUE = {"1", "true", "yes", "on"}
FALSE = {"0", "false", "no", "off", ""}


class SettingsError(ValueError):
    """A setting has a value that cannot be used; the message names it."""


@dataclass(frozen=True, slots=True)
class Settings:
    sandbox: SandboxLimits = field(default_factory=SandboxLimits)
    pool: PoolSettings = field(default_factory=PoolSettings)
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
    sandbox = _section(SandboxLimits, SANDBOX_PREFIX, values)
    pool = _section(PoolSettings, POOL_PREFIX, values)
    try:
        return Settings(
            sandbox=sandbox,
            pool=pool,
            sandbox_image=values.get("CELLMATE_SANDBOX_IMAGE", ""),
            instance=values.get("CELLMATE_INSTANCE", "default") or "default",
            data_dir=Path(values.get("CELLMATE_DATA_DIR", ".data") or ".data"),
            debian_mirror=values.get("CELLMATE_DEBIAN_MIRROR", "")
            or "http://deb.debian.org/debian",
        )
    except ValueError as exc:
        raise SettingsError(str(exc)) from exc


def _section(kind: type[T], prefix: str, values: Mapping[str, str]) -> T:
    """A settings dataclass from `<prefix><FIELD>` variables; defaults for the rest."""
    hints = typing.get_type_hints(kind)
    given: dict[str, Any] = {}
    for item in dataclasses.fields(kind):  # type: ignore[arg-type]
        name = prefix + item.name.upper()
        if name in values:
            given[item.name] = _parse(name, values[name].strip(), hints[item.name])
    try:
        return kind(**given)
    except ValueError as exc:
        raise SettingsError(f"{exc} (check the {prefix}* settings)") from exc


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
