"""`%pip install` in a sandbox on the allowlist network, under runc and runsc: from a package
index inside a network namespace the test creates, through the egress proxy, a pure-Python
wheel and one with a compiled extension install into the sandbox's packages place and import;
with the index's door closed, the proxy refuses pip (and tells the bot) and nothing is
installed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path

import pytest

from bench.standins.doors import FixedDoors, guarded_network
from bench.standins.netns import namespace
from bench.standins.package_index import COMPILED, PURE, Index, serving_index
from bot.conversations.keys import ConversationKey
from bot.ops.egress_link import start_egress
from bot.sandbox_words import spoken
from bot.workspaces import StoredWorkspaces
from executor import Executor, SandboxLimits, Status, default_tag
from executor.docker_backend import DockerBackend
from executor.egress import DEFAULT_PROXY_PORT
from storage.local import LocalStorage
from tests.integration.conftest import NO_POOL
from tests.support.links import SECRET
from tests.support.sandboxes import TEST_INSTANCE

pytestmark = [pytest.mark.docker, pytest.mark.netns]

GUARD = Path(__file__).resolve().parents[2] / "scripts" / "guard-sandbox-network.sh"
CONVERSATION = ConversationKey("console", "", "", "packages")

INSTALL = f"%pip install --no-color --progress-bar off {PURE} {COMPILED}"
IMPORT = "import cmdemo_pure, cmdemo_fast\nprint(cmdemo_pure.VALUE, cmdemo_fast.answer())"


@asynccontextmanager
async def index_and_executor(
    runtime: str, tmp_path: Path
) -> AsyncIterator[tuple[Index, Executor, FixedDoors]]:
    async with (
        namespace() as space,
        serving_index(space, tmp_path / "index") as index,
        proxied_executor(runtime, index) as (executor, doors),
    ):
        yield index, executor, doors


@asynccontextmanager
async def proxied_executor(
    runtime: str, index: Index, workspaces: StoredWorkspaces | None = None
) -> AsyncIterator[tuple[Executor, FixedDoors]]:
    """An executor in allowlist mode with its egress proxy, pip pointed at `index`."""
    limits = SandboxLimits(
        runtime=runtime,  # type: ignore[arg-type]
        egress="allowlist",
        pip_index_url=index.url,
        timeout_s=120,
    )
    backend = DockerBackend(default_tag(), instance=TEST_INSTANCE)
    async with (
        guarded_network(TEST_INSTANCE, DEFAULT_PROXY_PORT),
        Executor(
            default_tag(),
            limits=limits,
            backend=backend,
            instance=TEST_INSTANCE,
            pool=NO_POOL,
            workspaces=workspaces,
        ) as executor,
    ):
        doors = FixedDoors()
        link = await start_egress(executor, doors, DEFAULT_PROXY_PORT, "")
        try:
            yield executor, doors
        finally:
            await link.close()


async def test_pip_installs_a_pure_and_a_compiled_wheel_through_the_door(
    runtime: str, tmp_path: Path
) -> None:
    async with index_and_executor(runtime, tmp_path) as (index, executor, doors):
        session = executor.session(CONVERSATION.id)
        doors.open = (index.door,)
        installed = await session.run(INSTALL)
        assert installed.status is Status.OK, installed.stdout + installed.stderr
        assert "Successfully installed cmdemo-fast-1.0 cmdemo-pure-1.0" in installed.stdout
        imported = await session.run(IMPORT)
        assert imported.status is Status.OK, imported.stderr
        assert imported.stdout == "pure python, from the index 42\n"
        assert doors.refused == []


async def test_pip_gets_the_refusal_when_the_index_is_closed(runtime: str, tmp_path: Path) -> None:
    async with index_and_executor(runtime, tmp_path) as (index, executor, doors):
        session = executor.session(CONVERSATION.id)
        refused = await session.run(INSTALL.replace("install", "install --retries 0 --timeout 10"))
        # pip reads a refused index page as an empty one; the run's note (bot side) says why.
        assert "No matching distribution found for cmdemo-pure" in refused.stdout
        assert (index.address, index.port) in doors.refused
        missing = await session.run(IMPORT)
        assert missing.status is Status.ERROR
        assert "No module named 'cmdemo_pure'" in missing.stderr + str(missing.error)


@pytest.mark.any_runtime
async def test_installed_packages_come_back_with_the_workspace(
    runtime: str, tmp_path: Path
) -> None:
    """Across a restart of the bot: the workspace records what pip installed, the next
    session installs exactly that again, and then loads the variables that need it (a
    function of each package, pickled by reference)."""
    store = StoredWorkspaces(LocalStorage(tmp_path / "files", SECRET), SECRET, timedelta(days=1))
    async with namespace() as space, serving_index(space, tmp_path / "index") as index:
        async with proxied_executor(runtime, index, store) as (first, doors):
            session = first.session(CONVERSATION.id)
            doors.open = (index.door,)
            installed = await session.run(INSTALL)
            assert installed.status is Status.OK, installed.stdout + installed.stderr
            kept = await session.run(
                "from cmdemo_pure import shout\nimport cmdemo_fast\nanswer = cmdemo_fast.answer"
            )
            assert kept.status is Status.OK, kept.stderr
        # The executor's exit saved the workspace, as a restart of the bot does.
        async with proxied_executor(runtime, index, store) as (second, doors):
            doors.open = (index.door,)
            back = spoken(
                await second.session(CONVERSATION.id).run("print(shout('back'), answer())")
            )
            assert back.status is Status.OK, back.message + back.stderr
            assert back.stdout == "BACK! 42\n"
            assert "Installed its packages again: cmdemo_fast==1.0, cmdemo_pure==1.0." in (
                back.message
            )
            assert doors.refused == []
