"""The packages a session installed with pip (into the packages folder that allowlist mode
mounts, PIP_TARGET), as `name==version` pins: what a saved workspace records, and what its
restore installs again, exactly."""

from __future__ import annotations

import os
from pathlib import Path

from executor import wire

INSTALL_TIMEOUT_S = 600


def packages_dir() -> Path | None:
    """The folder pip installs into here; None where the sandbox has none (no network)."""
    target = os.environ.get("PIP_TARGET", "")
    return Path(target) if target.startswith("/") and Path(target).is_dir() else None


def installed() -> tuple[str, ...]:
    """The distributions in the packages folder, from their `.dist-info` folders' names
    (`name-version.dist-info`, in which pip's name holds no '-')."""
    folder = packages_dir()
    if folder is None:
        return ()
    found = []
    for entry in sorted(folder.iterdir()):
        if entry.name.endswith(".dist-info") and entry.is_dir() and not entry.is_symlink():
            name, _, version = entry.name.removesuffix(".dist-info").partition("-")
            found.append(f"{name}=={version}")
    return wire.pins(tuple(found))


# Runs in the kernel (with its environment: the index, the proxy, the installation's CA), in a
# subprocess: pip installs the pins in FOLDER/wanted.json exactly, without resolving
# dependencies (the list holds every distribution the session had), and the kernel then
# finds the new modules.
INSTALL_CODE = """
def _cellmate_install(folder):
    import importlib, json, os, subprocess, sys
    with open(os.path.join(folder, 'wanted.json')) as found:
        wanted = [str(pin) for pin in json.load(found)]
    command = [sys.executable, '-m', 'pip', 'install', '--no-deps', '--no-input',
               '--disable-pip-version-check', '--no-color', '--quiet', '--retries', '2',
               *wanted]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT,
                              stdin=subprocess.DEVNULL, cwd='/tmp')
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        said = [line for line in lines if line.startswith('ERROR')] or lines or ['pip failed']
        report = {'ok': done.returncode == 0, 'error': said[-1][-500:]}
    except subprocess.TimeoutExpired:
        report = {'ok': False, 'error': 'pip took longer than TIMEOUT s'}
    importlib.invalidate_caches()
    with open(os.path.join(folder, 'report.json'), 'w') as out:
        json.dump(report, out)
_cellmate_with_data_off(lambda: _cellmate_install(FOLDER))
del _cellmate_install, _cellmate_with_data_off
""".replace("TIMEOUT", str(INSTALL_TIMEOUT_S))
