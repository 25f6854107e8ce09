"""What a run asks of its sandbox beside its code: the language it is in, and environment
variables and a working folder that hold for that run only (wire `Run.language`, `env`,
`cwd`), checked here with reasons a person can read before anything is sent."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from executor import wire
from executor.errors import InvalidInput
from executor.limits import is_bot_variable

ALIASES: dict[str, wire.Language] = {
    "python": "python",
    "python3": "python",
    "py": "python",
    "ipython": "python",
    "r": "r",
    "javascript": "javascript",
    "js": "javascript",
    "node": "javascript",
    "nodejs": "javascript",
    "typescript": "typescript",
    "ts": "typescript",
    "bash": "bash",
    "sh": "bash",
    "shell": "bash",
}
"""Names people and models give a language (fence tags, `--lang`, E2B's names)."""

TITLES: dict[str, str] = {
    "python": "Python",
    "r": "R",
    "javascript": "JavaScript",
    "typescript": "TypeScript",
    "bash": "Bash",
}


def language_named(name: str) -> wire.Language | None:
    """The language a name stands for, or None."""
    return ALIASES.get(name.strip().lower())


@dataclass(frozen=True, slots=True)
class RunScope:
    language: wire.Language = "python"
    env: Mapping[str, str] = field(default_factory=dict)
    """Environment variables for this run only (back as they were after it)."""
    cwd: str = ""
    """The working folder for this run only, relative to /mnt/data ("": /mnt/data)."""

    @property
    def title(self) -> str:
        return TITLES[self.language]


PYTHON = RunScope()


def run_scope(
    language: str = "python", env: Mapping[str, str] | None = None, cwd: str | None = None
) -> RunScope:
    """A checked `RunScope`; InvalidInput with the reason otherwise."""
    found = language_named(language)
    if found is None:
        known = ", ".join(TITLES[name] for name in wire.LANGUAGES)
        raise InvalidInput(f"There is no language {language[:40]!r} (there are {known}).")
    values = dict(env or {})
    for name, value in values.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise InvalidInput("Environment variables are names and values that are text.")
        if is_bot_variable(name):
            raise InvalidInput(f"{name} is one of the bot's own settings: it cannot be set.")
    try:
        values = wire.run_env(values)
        folder = wire.run_cwd(cwd or "")
    except wire.Malformed as exc:
        raise InvalidInput(f"{str(exc)[:1].upper()}{str(exc)[1:]}.") from None
    return RunScope(found, values, folder)
