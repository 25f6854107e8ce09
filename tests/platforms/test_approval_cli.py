"""Code approval through `cellmate chat` as operators run it: the policy from the
environment, the answers piped in, the code run in the real sandbox."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.standins.openai_server import ScriptedModel, runs, says
from tests.platforms.test_console import chat_through_a_pipe
from tests.support.platforms import cli_environment

pytestmark = pytest.mark.docker


async def test_the_default_policy_from_the_environment_asks_before_each_run(
    model: ScriptedModel, tmp_path: Path
) -> None:
    model.script(
        runs("print(6 * 7)"),
        says("It is 42."),
        runs("print('model')"),
        says("You ran your own code instead."),
        runs("import os; os.remove('/mnt/data/x')"),
        says("I left your files alone."),
    )
    messages = (
        "what is 6 times 7?\n\ny\n\n"
        "print something\n\ne\nprint('edited', 6 * 7)\n.\n\n"
        "delete my files\n\nn\n\n/policy\n"
    )
    env = cli_environment(
        tmp_path / "data",
        OPENAI_BASE_URL=model.base_url,
        OPENAI_API_KEY="k",
        OPENAI_MODEL="m",
        CELLMATE_POLICY_DEFAULT="approve",
    )
    code, out, err = await chat_through_a_pipe(messages, env)
    assert code == 0, err
    assert out.count("Run this code? [y]es/[n]o/[e]dit") == 3
    assert "42\n" in out
    assert "It is 42." in out
    assert "edited 42\n" in out  # the edited code ran, in the sandbox
    assert "You ran your own code instead." in out
    assert "🚫 Cancelled by you; it was not run." in out
    assert "I left your files alone." in out
    assert "The code policy here is approve (from the default)" in out
    told = [m["content"] for m in model.requests[3]["messages"] if m["role"] == "tool"]
    assert "print('edited', 6 * 7)" in told[-1]
    assert "edited 42" in told[-1]
