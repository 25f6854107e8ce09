"""What goes into the bot's image, decided on the host (no Docker needed)."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

from bot.ops.images import bot_tag, runtime_requirements


def test_the_image_pins_the_installed_runtime_closure_and_no_dev_tools() -> None:
    pins = dict(line.split("==") for line in runtime_requirements().splitlines())
    assert {"aiohttp", "discord-py", "slack-bolt", "azure-storage-blob", "docker"} <= set(pins)
    assert "multidict" in pins  # aiohttp's own dependency
    assert not {"pytest", "mypy", "ruff", "hypothesis"} & set(pins)
    for name, version in pins.items():
        assert metadata.version(name) == version


def test_the_tag_follows_code_and_pins_but_not_bytecode(tmp_path: Path) -> None:
    (tmp_path / "bot").mkdir()
    (tmp_path / "executor").mkdir()
    code = tmp_path / "bot" / "serve.py"
    code.write_text("print('one')\n")
    (tmp_path / "executor" / "run.py").write_text("")
    first = bot_tag("aiohttp==3.9\n", tmp_path)
    assert first.startswith("cellmate-bot:")
    assert bot_tag("aiohttp==3.9\n", tmp_path) == first

    (tmp_path / "bot" / "__pycache__").mkdir()
    (tmp_path / "bot" / "__pycache__" / "serve.cpython-311.pyc").write_bytes(b"\0")
    assert bot_tag("aiohttp==3.9\n", tmp_path) == first

    assert bot_tag("aiohttp==3.10\n", tmp_path) != first
    code.write_text("print('two')\n")
    assert bot_tag("aiohttp==3.9\n", tmp_path) != first
