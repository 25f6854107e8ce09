"""A run's own environment variables and working folder (wire `Run.env`, `Run.cwd`): code
each language's kernel runs before the run's cells, and code that puts both back after
them, so that neither outlives the run.

Values never become code: Python and JavaScript read them from JSON text inside a string
literal, R from hex bytes, Bash from single-quoted words (`shlex.quote`); names are plain
identifiers (the decoder let nothing else through)."""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from runner.files import DATA_DIR


class OutsideData(ValueError):
    """A working folder that leads out of /mnt/data (through a link)."""


@dataclass(frozen=True)
class Scope:
    before: str
    after: str


def working_folder(cwd: str) -> str:
    """The run's folder as an absolute path, made if missing; OutsideData when it (through
    a link) is not inside /mnt/data."""
    if not cwd:
        return str(DATA_DIR)
    target = DATA_DIR / cwd
    target.mkdir(parents=True, exist_ok=True)
    real, data = Path(os.path.realpath(target)), Path(os.path.realpath(DATA_DIR))
    if real != data and data not in real.parents:
        raise OutsideData(f"the working folder {cwd!r} leads out of /mnt/data")
    if not real.is_dir():
        raise OutsideData(f"the working folder {cwd!r} is not a folder")
    return str(target)


def scope(language: str, env: Mapping[str, str], folder: str) -> Scope | None:
    """The code around a run in `language` for its env and folder; None when it has none."""
    if not env and folder == str(DATA_DIR):
        return None
    make = SCOPES[language]
    return make(dict(env), folder)


def _python(env: dict[str, str], folder: str) -> Scope:
    data = json.dumps({"env": env, "cwd": folder})
    before = (
        "def _cellmate_scope():\n"
        "    import os, sys, json\n"
        f"    wanted = json.loads({data!r})\n"
        "    sys._cellmate_scope = ({n: os.environ.get(n) for n in wanted['env']}, os.getcwd())\n"
        "    os.environ.update(wanted['env'])\n"
        "    os.chdir(wanted['cwd'])\n"
        "_cellmate_scope()\n"
        "del _cellmate_scope"
    )
    after = (
        "def _cellmate_unscope():\n"
        "    import os, sys\n"
        "    saved = getattr(sys, '_cellmate_scope', None)\n"
        "    if saved is None:\n"
        "        return\n"
        "    del sys._cellmate_scope\n"
        "    for name, value in saved[0].items():\n"
        "        if value is None:\n"
        "            os.environ.pop(name, None)\n"
        "        else:\n"
        "            os.environ[name] = value\n"
        "    try:\n"
        "        os.chdir(saved[1])\n"
        "    except OSError:\n"
        "        os.chdir('/mnt/data')\n"
        "_cellmate_unscope()\n"
        "del _cellmate_unscope"
    )
    return Scope(before, after)


def _r_text(value: str) -> str:
    """An R expression for the string, built from hex bytes only."""
    raw = value.encode("utf-8")
    if not raw:
        return '""'
    return "rawToChar(as.raw(c(" + ",".join(f"0x{b:02x}" for b in raw) + ")))"


def _r(env: dict[str, str], folder: str) -> Scope:
    names = "c(" + ",".join(f'"{name}"' for name in env) + ")" if env else "character(0)"
    sets = "".join(f"Sys.setenv({name} = {_r_text(value)}); " for name, value in env.items())
    before = (
        f"options(cellmate.scope = list(names = {names}, "
        f"values = Sys.getenv({names}, unset = NA), cwd = getwd())); "
        f"{sets}setwd({_r_text(folder)}); invisible(NULL)"
    )
    after = (
        "local({ s <- getOption('cellmate.scope'); if (!is.null(s)) { "
        "for (i in seq_along(s$names)) { n <- s$names[[i]]; v <- s$values[[i]]; "
        "if (is.na(v)) Sys.unsetenv(n) else do.call(Sys.setenv, stats::setNames(list(v), n)) }; "
        "tryCatch(setwd(s$cwd), error = function(e) setwd('/mnt/data')); "
        "options(cellmate.scope = NULL) } }); invisible(NULL)"
    )
    return Scope(before, after)


def _javascript(env: dict[str, str], folder: str) -> Scope:
    data = json.dumps(json.dumps({"env": env, "cwd": folder}))
    # `globalThis as any` would not parse as JavaScript, and a new property of globalThis
    # would not type-check as TypeScript: the saved state waits in process.env instead.
    before = (
        "{ const w = JSON.parse(" + data + "); const names = Object.keys(w.env); "
        "const saved: any = {}; for (const n of names) saved[n] = process.env[n]; "
        "process.env.__CELLMATE_SCOPE = JSON.stringify({ names, env: saved, cwd: process.cwd() }); "
        "Object.assign(process.env, w.env); process.chdir(w.cwd); }"
    )
    after = (
        "{ const raw = process.env.__CELLMATE_SCOPE; "
        "if (raw !== undefined) { delete process.env.__CELLMATE_SCOPE; const s = JSON.parse(raw); "
        "for (const n of s.names) { if (typeof s.env[n] === 'string') process.env[n] = s.env[n]; "
        "else delete process.env[n]; } "
        "try { process.chdir(s.cwd); } catch (e) { process.chdir('/mnt/data'); } } }"
    )
    return Scope(before, after)


def _plain_javascript(env: dict[str, str], folder: str) -> Scope:
    made = _javascript(env, folder)
    return Scope(made.before.replace("const saved: any = {}", "const saved = {}"), made.after)


def _bash(env: dict[str, str], folder: str) -> Scope:
    lines = ["__cellmate_scope_names=()"]
    for name, value in env.items():
        lines.append(
            f'if [ -n "${{{name}+x}}" ]; then __cellmate_was_{name}=${name}; '
            f"__cellmate_scope_names+=({name}=1); else __cellmate_scope_names+=({name}=0); fi"
        )
        lines.append(f"export {name}={shlex.quote(value)}")
    lines.append(f"__cellmate_scope_cwd=$PWD; cd -- {shlex.quote(folder)}")
    after = (
        'for __cellmate_n in "${__cellmate_scope_names[@]}"; do '
        "__cellmate_name=${__cellmate_n%=*}; "
        'if [ "${__cellmate_n#*=}" = 1 ]; then '
        'eval "export $__cellmate_name=\\"\\${__cellmate_was_$__cellmate_name}\\""; '
        'unset "__cellmate_was_$__cellmate_name"; else unset "$__cellmate_name"; fi; done; '
        'cd -- "${__cellmate_scope_cwd:-/mnt/data}" 2>/dev/null || cd /mnt/data; '
        "unset __cellmate_scope_names __cellmate_scope_cwd __cellmate_n __cellmate_name"
    )
    return Scope("\n".join(lines), after)


SCOPES = {
    "python": _python,
    "r": _r,
    "javascript": _plain_javascript,
    "typescript": _javascript,
    "bash": _bash,
}
