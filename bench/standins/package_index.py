"""A package index of the test's own: two wheels made here (one pure Python, one with a
compiled extension built with the machine's gcc for the sandbox's Python 3.11), listed as a
static "simple" index and served from inside a network namespace the test creates."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.standins.netns import Namespace

PURE = "cmdemo-pure"
COMPILED = "cmdemo-fast"
PORT = 8080
WAIT_S = 30.0

EXTENSION = r"""
#include <Python.h>
static PyObject *answer(PyObject *self, PyObject *unused) { return PyLong_FromLong(42); }
static PyMethodDef methods[] = {{"answer", answer, METH_NOARGS, "The answer."}, {0}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "cmdemo_fast", 0, -1, methods};
PyMODINIT_FUNC PyInit_cmdemo_fast(void) { return PyModule_Create(&module); }
"""


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode().rstrip("=")


def write_wheel(folder: Path, name: str, tag: str, files: dict[str, bytes]) -> Path:
    """A wheel of `files` (path in the wheel -> content), its metadata and RECORD included."""
    project = name.replace("-", "_")
    info = f"{project}-1.0.dist-info"
    files = {
        **files,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode(),
        f"{info}/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: cellmate-tests\n"
            f"Root-Is-Purelib: {'true' if tag == 'py3-none-any' else 'false'}\nTag: {tag}\n"
        ).encode(),
    }
    record = "".join(f"{path},{_digest(data)},{len(data)}\n" for path, data in files.items())
    path = folder / f"{project}-1.0-{tag}.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name_in, data in files.items():
            wheel.writestr(name_in, data)
        wheel.writestr(f"{info}/RECORD", record + f"{info}/RECORD,,\n")
    return path


def compiled_extension(work: Path) -> bytes:
    """The extension module, built for CPython 3.11 on x86-64 Linux (the sandbox's)."""
    source = work / "cmdemo_fast.c"
    source.write_text(EXTENSION)
    built = work / "cmdemo_fast.so"
    include = sysconfig.get_paths()["include"]
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O1", f"-I{include}", "-o", str(built), str(source)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return built.read_bytes()


def build_index(root: Path) -> Path:
    """`root/simple/<project>/` pages linking the two wheels; returns the `simple` folder."""
    wheels = root / "wheels"
    wheels.mkdir(parents=True)
    made = [
        (
            PURE,
            write_wheel(
                wheels,
                PURE,
                "py3-none-any",
                {
                    "cmdemo_pure/__init__.py": (
                        b"VALUE = 'pure python, from the index'\n\n\n"
                        b"def shout(text):\n    return text.upper() + '!'\n"
                    ),
                },
            ),
        ),
        (
            COMPILED,
            write_wheel(
                wheels,
                COMPILED,
                "cp311-cp311-linux_x86_64",
                {
                    "cmdemo_fast.cpython-311-x86_64-linux-gnu.so": compiled_extension(root),
                },
            ),
        ),
    ]
    simple = root / "simple"
    for project, wheel in made:
        page = simple / project
        page.mkdir(parents=True)
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        page.joinpath("index.html").write_text(
            f'<html><body><a href="../../wheels/{wheel.name}#sha256={digest}">'
            f"{wheel.name}</a></body></html>\n"
        )
    return simple


@dataclass(frozen=True)
class Index:
    address: str
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}/simple"

    @property
    def door(self) -> str:
        return f"{self.address}:{self.port}"


@asynccontextmanager
async def serving_index(space: Namespace, root: Path) -> AsyncIterator[Index]:
    """The index under `root`, served over HTTP from inside `space` until the end."""
    build_index(root)
    process = await asyncio.create_subprocess_exec(
        "ip", "netns", "exec", space.name,
        sys.executable, "-u", "-m", "http.server", str(PORT),
        "--bind", space.address, "--directory", str(root),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        # Its first line says it listens (seen from inside: the namespace may be joined to
        # another than this host's).
        assert process.stdout is not None
        first = await asyncio.wait_for(process.stdout.readline(), WAIT_S)
        if not first.startswith(b"Serving HTTP"):
            raise OSError(f"the package index did not start: {first[:200]!r}")
        yield Index(space.address, PORT)
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
