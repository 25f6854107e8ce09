"""Nothing saved in /mnt/data stands in for a module that the kernel, the runner's scripts
(restore, snapshot, preview) or a restored variable import, under runc and runsc: not a
module file (cloudpickle.py, pandas.py, json.py), not a package folder (numpy/), not the
start-up hooks (sitecustomize.py, usercustomize.py, a .pth file), not even while the kernel
starts with them there; the user's own uniquely named modules still import."""

from __future__ import annotations

import json
import shlex
from typing import Any

import pytest

from executor import Executor, Status, docker_backend
from executor.archive import build_input_tar
from tests.integration.sandbox_probes import ask, raw_sandbox, run_cells

pytestmark = pytest.mark.docker


def _marker(name: str) -> str:
    """A module that, if it ever runs, leaves a file behind that says so."""
    return f"open('/mnt/data/ran-{name}', 'w').close()\n"


SHADOWS = {
    "cloudpickle.py": _marker("cloudpickle"),
    "pandas.py": _marker("pandas"),
    "mpmath.py": _marker("mpmath"),
    "bs4/__init__.py": _marker("bs4"),
    "numpy/__init__.py": _marker("numpy"),
    "json.py": _marker("json"),
    "pickle.py": _marker("pickle"),
    "zmq/__init__.py": _marker("zmq"),
    "ipykernel_launcher.py": _marker("ipykernel_launcher"),
    "ipykernel/__init__.py": _marker("ipykernel"),
    "kernel_launch.py": _marker("kernel_launch"),
    "sitecustomize.py": _marker("sitecustomize"),
    "usercustomize.py": _marker("usercustomize"),
    "cellmate.pth": "import os; " + _marker("pth"),
    "helpers.py": "value = 'mine'\n",
}

# Modules the data stack's imports try but the image lacks (pandas asks for bottleneck and
# numexpr), and a regular package in the place of a namespace package (mpl_toolkits): even
# last on the path, a file in /mnt/data would be found for these.
MISSING_OR_NAMESPACE = {
    "bottleneck.py": _marker("bottleneck"),
    "numexpr.py": _marker("numexpr"),
    "mpl_toolkits/__init__.py": _marker("mpl_toolkits"),
    "pyarrow.py": _marker("pyarrow"),
}


# What ran, and where the modules came from, as the user's next run sees it.
WHAT_RAN = """
import os, sys
sys.path[:] = [entry for entry in sys.path if entry not in ('', '/mnt/data')] + ['/mnt/data']
import bs4, cloudpickle, json, mpmath, numpy, pandas, pickle, zmq, helpers
shadowed = [m.__name__ for m in (bs4, cloudpickle, json, mpmath, numpy, pandas, pickle, zmq)
            if m.__file__.startswith('/mnt/data')]
print(helpers.value, shadowed, sorted(n for n in os.listdir('/mnt/data') if n.startswith('ran-')))
"""
NOTHING_RAN = "mine [] []\n"

# The kernel starts after the files are in /mnt/data (as when files arrive with a new
# sandbox while it starts): the entry point writes them, then becomes the runner.
WRITE_SHADOWS = (
    "import json, os, pathlib\n"
    "for name, text in json.loads(os.environ['SHADOWS']).items():\n"
    "    path = pathlib.Path('/mnt/data', name)\n"
    "    path.parent.mkdir(parents=True, exist_ok=True)\n"
    "    path.write_text(text)\n"
)


def files_before_the_runner(monkeypatch: pytest.MonkeyPatch, files: dict[str, str]) -> None:
    """Sandboxes started from here find `files` in /mnt/data before their kernel starts."""
    specs = docker_backend.sandbox_specs

    def files_first(*args: Any, **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        volume, container = specs(*args, **kwargs)
        container["environment"] = {**container["environment"], "SHADOWS": json.dumps(files)}
        python = "/opt/venv/bin/python -I"
        container["entrypoint"] = [
            "/bin/sh",
            "-c",
            f"{python} -c {shlex.quote(WRITE_SHADOWS)} "
            f"&& exec {python} /opt/cellmate/cellmate_runner.py",
        ]
        return volume, container

    monkeypatch.setattr(docker_backend, "sandbox_specs", files_first)


@pytest.mark.warm_up
async def test_a_kernel_that_starts_among_shadows_imports_the_real_modules(
    executor: Executor, monkeypatch: pytest.MonkeyPatch
) -> None:
    files_before_the_runner(monkeypatch, SHADOWS)
    result = await executor.session("shadows").run(WHAT_RAN)
    assert result.status is Status.OK, result.message
    assert result.stdout == NOTHING_RAN


async def test_restore_snapshot_and_preview_import_the_real_modules(runtime: str) -> None:
    async with raw_sandbox(runtime) as first:
        made, text = await run_cells(
            first,
            "import bs4, mpmath, numpy as np, pandas as pd\n"
            "df = pd.DataFrame({'sales': [3, 4]})\n"
            "arr = np.arange(4)\n"
            "half = mpmath.mpf(1) / 2\n"
            "soup = bs4.BeautifulSoup('<p>kept</p>', 'html.parser')\n"
            "def double(v):\n"
            "    return v * 2\n",
        )
        assert made == "ok", text
        saved = (await ask(first, {"op": "snapshot", "id": "s", "max_bytes": 10**7}, "snapshot"))[
            -1
        ]
        assert sorted(saved["saved"]) == ["arr", "df", "double", "half", "soup"], saved

    files = {**SHADOWS, "sales.csv": "city,sales\nOslo,3\nLima,4\n"}
    async with raw_sandbox(runtime) as second:
        await second.put_files(
            build_input_tar({k: v.encode() for k, v in files.items()}, 100, 10**7, folders=True)
        )
        # A run may put the data folder first on the path, as users sometimes do.
        moved, text = await run_cells(
            second, "import sys\nsys.path.insert(0, '/mnt/data')\nsys.path.insert(0, '')"
        )
        assert moved == "ok", text
        request = {"op": "restore", "id": "w", "variables": saved["variables"], "cells": []}
        restored = (await ask(second, request, "restored"))[-1]
        assert "error" not in restored, restored
        assert sorted(restored["restored"]) == ["arr", "df", "double", "half", "soup"], restored

        again = await ask(second, {"op": "snapshot", "id": "t", "max_bytes": 10**7}, "snapshot")
        assert "error" not in again[-1], again[-1]

        previewed = await ask(
            second, {"op": "preview", "id": "p", "paths": ["sales.csv"]}, "previewed"
        )
        assert previewed[-1]["previews"]["sales.csv"].startswith("sales.csv: 2 rows"), previewed

        status, text = await run_cells(
            second, WHAT_RAN + "print(df.sales.sum(), arr.sum(), double(2), half * 4, soup.p.text)"
        )
        assert status == "ok", text
        assert text == NOTHING_RAN + "7 6 4 2.0 kept\n"


async def test_files_there_before_the_warm_up_never_run_before_user_code(
    runtime: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attachments (or a restored workspace's files) can reach a sandbox that is still
    warming up, when a conversation waits for one, without any code being allowed to run:
    the warm-up's imports (the whole data stack here) must not find them, nor must the
    runner's own requests. The files are there before the kernel starts, the surest case."""
    files_before_the_runner(monkeypatch, {**SHADOWS, **MISSING_OR_NAMESPACE})
    async with raw_sandbox(runtime, preload="numpy,pandas,matplotlib") as sandbox:
        # What the runner itself does with the kernel before any user code: its set-up, the
        # warm-up's imports (raw_sandbox waited for them), an `env` request, a snapshot.
        await ask(sandbox, {"op": "env", "id": "v", "values": {"A": "1"}}, "env")
        await ask(sandbox, {"op": "snapshot", "id": "s", "max_bytes": 10**6}, "snapshot")
        listed = await ask(sandbox, {"op": "fs", "id": "f", "action": "list", "path": ""}, "fs")
        names = {str(entry["path"]) for entry in listed[-1]["entries"]}
        assert "helpers.py" in names, names
        assert not {n for n in names if n.startswith("ran-")}, names
        # The user's own module imports by its name once user code runs.
        status, text = await run_cells(sandbox, "import helpers\nprint(helpers.value)")
        assert status == "ok", text
        assert text == "mine\n"
