"""`cellmate exec`, `demo` and `build-image` as a person runs them, with real containers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from tests.integration.conftest import TEST_INSTANCE

pytestmark = pytest.mark.docker

CHART = "import matplotlib.pyplot as plt\nplt.bar(['a', 'b'], [3, 5])\nplt.show()\n"


def cellmate(*args: str, stdin: str | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "CELLMATE_INSTANCE": TEST_INSTANCE, **env}
    return subprocess.run(
        [sys.executable, "-m", "bot", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=environment,
        timeout=300,
        check=False,
    )


# Output and file names a hostile program chooses: sequences that clear the screen, write the
# clipboard, reset the terminal, or are split across two writes; names that fake a result
# line, carry escapes or undecodable bytes, or aim outside the output folder.
HOSTILE = r"""
import os, sys, time
for name in [b"bad\xff.txt", b"esc\x1b]0;pwned\x07.txt", b"x\n\xe2\x9c\x93 ok in 0.1 s",
             b".bashrc", b"-n", b"long" + b"y" * 240 + b".txt", b"data.csv", b"DATA.csv"]:
    with open(b"/mnt/data/" + name, "wb") as f:
        f.write(b"1")
os.makedirs("sub", exist_ok=True)
open("sub/data.csv", "w").write("2")
print("one\x1b]52;c;aGk=\x07two\x1b", end="", flush=True)
time.sleep(0.5)
print("[2Jthree\x9b2Jfour\rfive\x08six\u202eseven\x1bc")
sys.stderr.write("err\x1b[31m\n")
"""


def assert_terminal_safe(shown: bytes) -> str:
    """The bytes as text, after checking that no terminal control is among them."""
    text = shown.decode("utf-8")  # strict: an undecodable byte would fail here
    assert not set(text) & {"\x1b", "\r", "\b", "\x07", *map(chr, range(0x80, 0xA0))}
    return text


def test_exec_shows_hostile_output_and_names_safely_and_saves_plain_names(
    tmp_path: Path,
) -> None:
    code = tmp_path / "hostile.py"
    code.write_text(HOSTILE)
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "bot", "exec", "--out", str(out), str(code)],
        capture_output=True,
        env={**os.environ, "CELLMATE_INSTANCE": TEST_INSTANCE},
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = assert_terminal_safe(done.stdout).split("\n")
    assert lines[:2] == ["onetwothreefour", "five␈six\\u202eseven"]
    assert "err" in lines
    files = out.resolve() / "files"
    assert f"bad\\xff.txt (1 B) -> {files}/bad_.txt" in lines
    assert f"esc\\x1b]0;pwned\\x07.txt (1 B) -> {files}/esc_]0;pwned_.txt" in lines
    assert f"x\\n✓ ok in 0.1 s (1 B) -> {files}/x_✓ ok in 0.1 s" in lines
    assert f".bashrc (1 B) -> {files}/_bashrc" in lines
    assert [line for line in lines if line.startswith("✓")] == [lines[-2]]  # the real one
    saved = {path.name for path in files.iterdir()}
    duplicates = {name for name in saved if name.casefold().startswith("data")}
    assert sorted(name.casefold() for name in duplicates) == ["data-2.csv", "data.csv"]
    assert saved - duplicates == {
        "bad_.txt",
        "esc_]0;pwned_.txt",
        "x_✓ ok in 0.1 s",
        "_bashrc",
        "_n",
        "long" + "y" * 192 + ".txt",
        "sub_data.csv",
    }
    assert sorted(path.name for path in tmp_path.iterdir()) == ["hostile.py", "out"]


def test_exec_json_has_the_documented_keys(tmp_path: Path) -> None:
    code = tmp_path / "fail.py"
    code.write_text("print('partial')\nraise ValueError('nope')\n")
    done = cellmate("exec", "--json", str(code))
    assert done.returncode == 0, done.stderr  # user code failing is still a result
    result = json.loads(done.stdout)
    assert {"status", "stdout", "stderr", "results", "error", "files", "duration_ms"} <= set(result)
    assert result["status"] == "error"
    assert result["stdout"] == "partial\n"
    assert result["error"]["name"] == "ValueError"
    assert result["error"]["value"] == "nope"


def test_exec_saves_charts_and_files_and_prints_for_people(tmp_path: Path) -> None:
    data = tmp_path / "numbers.csv"
    data.write_text("n\n1\n2\n")
    out = tmp_path / "out"
    code = (
        CHART
        + "import pandas as pd\n"
        + "pd.read_csv('numbers.csv').sum().to_csv('total.csv')\n"
        + "print('done')\n"
    )
    done = cellmate("exec", "--out", str(out), "--file", str(data), "-", stdin=code)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "done"
    assert any(line.startswith("[chart 1: image/png") and "saved to" in line for line in lines)
    assert any(line.startswith("total.csv (") for line in lines)
    assert lines[-1].startswith("✓ ok in ")
    with Image.open(out / "output-1.png") as chart:
        assert chart.format == "PNG"
    assert (out / "files" / "total.csv").read_text() == ",0\nn,3\n"
    assert not (out / "files" / "numbers.csv").exists()
    notebook = json.loads((out / "notebook.ipynb").read_text())
    assert notebook["cells"][0]["outputs"][-1]["text"] == "done\n"


def test_exec_timeout_option(tmp_path: Path) -> None:
    done = cellmate("exec", "--timeout", "2", "-", stdin="import time\ntime.sleep(30)\n")
    assert done.returncode == 0
    assert done.stdout.splitlines()[-1].endswith(
        "The code ran longer than the 2 s time limit; it was interrupted."
    )


def test_exec_without_an_image_says_how_to_build_it() -> None:
    done = cellmate(
        "exec", "-", stdin="print(1)", CELLMATE_SANDBOX_IMAGE="cellmate-sandbox:missing"
    )
    assert done.returncode == 1
    assert "cellmate-sandbox:missing is not built. Run `cellmate build-image`." in done.stderr


def test_exec_without_an_engine_says_so() -> None:
    done = cellmate("exec", "-", stdin="print(1)", DOCKER_HOST="unix:///nonexistent/docker.sock")
    assert done.returncode == 1
    assert "No Docker engine answers (unix:///nonexistent/docker.sock)" in done.stderr
    assert "Traceback" not in done.stderr


def test_exec_with_a_missing_input_file() -> None:
    done = cellmate("exec", "--file", "/nonexistent/data.csv", "-", stdin="print(1)")
    assert done.returncode == 2
    assert "cannot read input file /nonexistent/data.csv" in done.stderr


def test_bad_setting_is_named() -> None:
    done = cellmate("exec", "-", stdin="print(1)", CELLMATE_SANDBOX_MEMORY_MB="lots")
    assert done.returncode == 2
    assert "CELLMATE_SANDBOX_MEMORY_MB must be a whole number, got 'lots'" in done.stderr


def test_demo_shows_a_table_and_a_chart(tmp_path: Path) -> None:
    done = cellmate("demo", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "2025-12" in done.stdout
    assert f"Open the chart: file://{tmp_path}/output-1.png" in done.stdout
    with Image.open(tmp_path / "output-1.png") as chart:
        assert chart.size[0] >= 400


def test_build_image_is_a_no_op_when_inputs_are_unchanged() -> None:
    done = cellmate("build-image")
    assert done.returncode == 0, done.stderr
    assert "is up to date" in done.stdout
