"""The runner protocol's contract (executor/wire/), run the same way against the fake, the
Docker backend (runc, gVisor) and Kubernetes, so the fake cannot drift from the real runner:
runs, interrupts, file operations, environment variables, export, previews, snapshots and
restores, claims and resumes, kept runs followed again, and junk on the runner's input."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from executor import Executor, PoolSettings, SandboxLimits, wire
from executor.archive import build_input_tar
from executor.errors import SandboxTaken
from executor.protocol import Sandbox, SandboxBackend, SessionKeeper
from executor.runner_client import RUN_EVENTS, RunnerClient
from tests.contract.conftest import ASKING, ENV_NAME, started
from tests.support.runner_events import notices_and_outputs

FILES = {"in/sales.csv": b"a,b\n1,2\n", "top.txt": b"top"}


async def run(
    client: RunnerClient, cells: Sequence[str], language: wire.Language = "python"
) -> tuple[list[Any], wire.Done]:
    """A run's outputs and its done."""
    outputs: list[Any] = []
    run_id = await client.run(
        cells, output_limit=10**6, rich_limit=10**7, rich_count_limit=100, language=language
    )
    async with asyncio.timeout(120):
        async for event in taken(client, run_id):
            if isinstance(event, wire.Done):
                return outputs, event
            outputs.append(event.output)
    raise AssertionError("the sandbox ended before the run did")


async def taken(client: RunnerClient, run_id: str) -> AsyncIterator[RUN_EVENTS]:
    """A run's events after its `Started`, which comes first, before any of its code runs."""
    events = client.run_events(run_id)
    async with asyncio.timeout(120):
        first = await anext(events)
    assert first == wire.Started(id=run_id), first
    async for event in events:
        assert not isinstance(event, wire.Started), event
        yield event


def text(outputs: list[Any]) -> str:
    return "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")


async def put(sandbox: Sandbox, limits: SandboxLimits) -> None:
    await sandbox.put_files(build_input_tar(FILES, 10, 10**6, limits.uid, limits.gid, folders=True))


async def test_a_run_streams_its_outputs_then_says_done(sandbox: Sandbox) -> None:
    outputs, done = await run(RunnerClient(sandbox), ["print(6 * 7)"])
    assert (text(outputs), done.status) == ("42\n", "ok")


async def test_a_cell_that_raises_ends_the_run_there(sandbox: Sandbox) -> None:
    outputs, done = await run(RunnerClient(sandbox), ["raise ValueError('no')", "print('never')"])
    assert done.status == "error"
    assert [o.get("ename") for o in outputs if o.get("output_type") == "error"] == ["ValueError"]
    assert "never" not in text(outputs)


async def test_interrupt_stops_a_cell_and_the_kernel_goes_on(sandbox: Sandbox) -> None:
    client = RunnerClient(sandbox)
    run_id = await client.run(
        ["print('started', flush=True)\nimport time\ntime.sleep(600)"],
        output_limit=10**6,
        rich_limit=10**7,
        rich_count_limit=100,
    )
    events = taken(client, run_id)
    async with asyncio.timeout(120):
        first = await anext(events)
        assert isinstance(first, wire.Output)
        await client.interrupt()
        rest = [event async for event in events]
    done = rest[-1]
    assert isinstance(done, wire.Done)
    assert done.status == "error"
    errors = [e.output.get("ename") for e in rest if isinstance(e, wire.Output)]
    assert errors == ["KeyboardInterrupt"]
    outputs, again = await run(client, ["print(6 * 7)"])
    assert (text(outputs), again.status) == ("42\n", "ok")


async def test_input_is_asked_answered_and_a_getpass_answer_masked(sandbox: Sandbox) -> None:
    client = RunnerClient(sandbox)
    limits = {"output_limit": 10**6, "rich_limit": 10**7, "rich_count_limit": 100}
    run_id = await client.run([ASKING], stdin=True, **limits)
    await client.send(wire.InputReply(id="another-run", value="stray"))  # ignored
    answers = iter(["one", "two-secret"])
    asked, outputs = [], []
    async with asyncio.timeout(120):
        async for event in taken(client, run_id):
            if isinstance(event, wire.InputRequest):
                asked.append((event.prompt, event.password))
                await client.send(wire.InputReply(id=run_id, value=next(answers)))
            elif isinstance(event, wire.Output):
                outputs.append(event.output)
            else:
                assert event.status == "ok"
    assert asked == [("First? ", False), ("Second? ", True)]
    assert text(outputs) == "one ••••\n"

    run_id = await client.run(["input('anyone? ')"], stdin=True, **limits)
    async with asyncio.timeout(120):
        async for event in taken(client, run_id):
            if isinstance(event, wire.InputRequest):
                await client.send(wire.InputReply(id=run_id, given=False))
            elif isinstance(event, wire.Done):
                assert event.status == "error"
            else:
                assert event.output.get("ename") == "EOFError"
    outputs, done = await run(client, ["input('anyone? ')"])  # a run without stdin
    assert done.status == "error"
    assert [o.get("ename") for o in outputs] == ["StdinNotImplementedError"]


async def test_file_operations_in_mnt_data(sandbox: Sandbox, limits: SandboxLimits) -> None:
    await put(sandbox, limits)
    client = RunnerClient(sandbox)
    listed = await client.fs("list", "")
    assert listed is not None
    assert listed.entries is not None
    assert [(e.path, e.type) for e in listed.entries] == [
        ("in", "dir"),
        ("top.txt", "file"),
        ("in/sales.csv", "file"),
    ]
    flat = await client.fs("list", "", recursive=False)
    assert flat is not None
    assert [e.path for e in flat.entries or ()] == ["in", "top.txt"]
    info = await client.fs("info", "in/sales.csv")
    assert info is not None
    assert info.entry is not None
    assert (info.entry.type, info.entry.size) == ("file", 8)
    assert info.entry.modified > 0
    missing = await client.fs("info", "missing.txt")
    assert missing is not None
    assert missing.entry is None
    assert missing.error
    made = await client.fs("make_dir", "out/charts")
    assert made is not None
    assert made.ok
    moved = await client.fs("rename", "in/sales.csv", to="out/charts/sales.csv")
    assert moved is not None
    assert moved.ok
    clash = await client.fs("rename", "top.txt", to="out/charts/sales.csv")
    assert clash is not None
    assert "already exists" in (clash.error or "")
    outside = await client.fs("info", "../etc/passwd")
    assert outside is not None
    assert "leaves /mnt/data" in (outside.error or "")
    for path in ("out", "top.txt"):
        removed = await client.fs("remove", path)
        assert removed is not None
        assert removed.ok
    left = await client.fs("list", "")
    assert left is not None
    assert [e.path for e in left.entries or ()] == ["in"]


async def test_environment_variables_reach_the_kernel(sandbox: Sandbox) -> None:
    client = RunnerClient(sandbox)
    answer = await client.env({ENV_NAME: "teal"})
    assert answer is not None
    assert answer.ok
    outputs, _ = await run(client, [f"import os\nprint(os.environ.get('{ENV_NAME}'))"])
    assert text(outputs) == "teal\n"


async def test_export_is_the_sessions_notebook(sandbox: Sandbox) -> None:
    client = RunnerClient(sandbox)
    await run(client, ["print(6 * 7)"])
    exported = await client.export()
    assert exported is not None
    assert exported.format == "ipynb"
    assert exported.content["nbformat"] == 4
    assert [cell["source"] for cell in exported.content["cells"]] == ["print(6 * 7)"]


async def test_previews_name_each_file_asked_for(sandbox: Sandbox, limits: SandboxLimits) -> None:
    await put(sandbox, limits)
    previewed = await RunnerClient(sandbox).preview(["in/sales.csv"])
    assert previewed is not None
    assert list(previewed.previews) == ["in/sales.csv"]
    assert previewed.previews["in/sales.csv"].startswith("in/sales.csv:")


async def test_a_snapshot_restores_into_another_sandbox(
    sandbox: Sandbox, backend: SandboxBackend, limits: SandboxLimits
) -> None:
    client = RunnerClient(sandbox)
    await run(client, ["x = 41"])
    snapshot = await client.snapshot(10**7)
    assert snapshot is not None
    assert snapshot.error is None
    assert "x" in snapshot.saved
    assert snapshot.cells == ("x = 41",)
    second = await started(backend, limits)
    try:
        other = RunnerClient(second)
        restored = await other.restore(snapshot.variables, snapshot.cells)
        assert restored is not None
        assert restored.error is None
        assert ("x" in restored.restored, dict(restored.failed)) == (True, {})
        outputs, _ = await run(other, ["print(x + 1)"])
        assert text(outputs) == "42\n"
    finally:
        await second.destroy()


async def test_r_variables_snapshot_beside_python_s_and_restore_into_another_sandbox(
    sandbox: Sandbox, backend: SandboxBackend, limits: SandboxLimits
) -> None:
    client = RunnerClient(sandbox)
    await run(client, ["x = 41"])
    _, done = await run(client, ["y <- 41"], "r")
    assert done.status == "ok"
    snapshot = await client.snapshot(10**7)
    assert snapshot is not None
    assert snapshot.error is None
    assert ("x" in snapshot.saved, snapshot.r_saved, dict(snapshot.r_skipped)) == (
        True,
        ("y",),
        {},
    )
    assert snapshot.r_variables
    second = await started(backend, limits)
    try:
        other = RunnerClient(second)
        restored = await other.restore(snapshot.variables, snapshot.cells, snapshot.r_variables)
        assert restored is not None
        assert restored.error is None
        assert (restored.r_restored, dict(restored.r_failed)) == (("y",), {})
        outputs, _ = await run(other, ['cat(y, "\\n", sep = "")'], "r")
        assert text(outputs) == "41\n"
    finally:
        await second.destroy()


async def test_an_install_without_a_network_says_why_and_records_nothing(
    sandbox: Sandbox,
) -> None:
    """A workspace's packages asked for where sandboxes have no network: pip's own error,
    and the next snapshot lists no package (none was installed)."""
    client = RunnerClient(sandbox)
    installed = await client.install(["cmdemo_pure==1.0"], timeout_s=120)
    assert installed is not None
    assert not installed.ok
    assert (installed.error or "").startswith("ERROR"), installed.error
    snapshot = await client.snapshot(10**7)
    assert snapshot is not None
    assert snapshot.packages == ()
    outputs, _ = await run(client, ["print(6 * 7)"])
    assert text(outputs) == "42\n"  # the kernel goes on


async def test_a_claimed_sandbox_answers_a_resume_and_goes_on(sandbox: Sandbox) -> None:
    client = RunnerClient(sandbox)
    await client.claim("contract-session")
    resumed = await client.resume()
    assert resumed is not None
    assert (resumed.session, resumed.busy) == ("contract-session", False)
    outputs, _ = await run(client, ["print(6 * 7)"])
    assert text(outputs) == "42\n"


async def test_another_host_adopts_a_claimed_sandbox_by_id_and_the_first_hears_it(
    backend: SandboxBackend, sandbox: Sandbox
) -> None:
    """What a replica that takes a session over does (`SessionKeeper.adopt`): it attaches to
    the sandbox by id while the first host is still attached, the runner answers it under
    the sandbox's key, and what the first host reads next is that answer: a takeover, not a
    forgery. An id that names no sandbox adopts nothing."""
    assert isinstance(backend, SessionKeeper)
    first = RunnerClient(sandbox)
    await first.claim("contract-session")
    await run(first, ["x = 41"])
    found = await backend.adopt(sandbox.id)
    assert found is not None
    try:
        assert (found.session, found.sandbox.id) == ("contract-session", sandbox.id)
        outputs, _ = await run(RunnerClient(found.sandbox), ["print(x)"])
        assert text(outputs) == "41\n"  # the very kernel
        with pytest.raises(SandboxTaken):
            await first.export()
    finally:
        await backend.detach(found.sandbox)
    assert await backend.adopt("cellmate-0123456789abcdef") is None


SLEEPER = "print('started', flush=True)\nimport time\ntime.sleep(600)"


async def test_a_kept_run_is_named_on_resume_and_followed_from_its_start(sandbox: Sandbox) -> None:
    """What a host that attached again gets for a run that went on in the background: the
    resume names it (and it is not interrupted), `follow` sends what it printed so far and
    then the rest; a run that was not kept, or an unknown id, is not found."""
    client = RunnerClient(sandbox)
    await client.claim("contract-session")
    run_id = await client.run([SLEEPER], output_limit=10**6, rich_limit=10**7, rich_count_limit=100)
    events = taken(client, run_id)
    async with asyncio.timeout(120):
        first = await anext(events)
        assert isinstance(first, wire.Output)
        resumed = await client.resume()
        assert resumed is not None
        assert (resumed.busy, resumed.kept) == (True, "")  # running, not kept yet
        await client.keep(run_id)
        resumed = await client.resume()
        assert resumed is not None
        assert (resumed.session, resumed.busy, resumed.kept) == ("contract-session", True, run_id)

        await client.follow("not-" + run_id)
        unknown = await anext(client.run_events("not-" + run_id))
        assert unknown == wire.Following(id="not-" + run_id, found=False)

        await client.follow(run_id)
        followed = client.run_events(run_id)
        following = await anext(followed)
        assert isinstance(following, wire.Following)
        assert following.found
        assert following.elapsed_ms >= 0
        again = await anext(followed)  # what it printed before, once more
        assert isinstance(again, wire.Output)
        assert again.output.get("text") == "started\n"
        await client.interrupt()
        rest = [event async for event in followed]
    done = rest[-1]
    assert isinstance(done, wire.Done)
    assert done.status == "error"
    resumed = await client.resume()
    assert resumed is not None
    assert (resumed.busy, resumed.kept) == (False, run_id)  # ended, still kept for a follow
    outputs, _ = await run(client, ["print(6 * 7)"])  # the next run ends what was kept
    assert text(outputs) == "42\n"
    resumed = await client.resume()
    assert resumed is not None
    assert resumed.kept == ""


async def run_in(
    client: RunnerClient, cells: Sequence[str], kernel: wire.Kernel
) -> tuple[list[Any], wire.Done]:
    outputs: list[Any] = []
    run_id = await client.run(
        cells, output_limit=10**6, rich_limit=10**7, rich_count_limit=100, kernel=kernel
    )
    async with asyncio.timeout(120):
        async for event in taken(client, run_id):
            if isinstance(event, wire.Done):
                return outputs, event
            outputs.append(event.output)
    raise AssertionError("the sandbox ended before the run did")


async def test_code_runs_beside_a_run_that_goes_on_in_a_kernel_of_its_own(
    sandbox: Sandbox,
) -> None:
    """A second kernel runs code while the first is busy: the same files, its own
    variables, its own interrupt; it ends once neither runs."""
    client = RunnerClient(sandbox)
    main_id = await client.run(
        [SLEEPER], output_limit=10**6, rich_limit=10**7, rich_count_limit=100
    )
    main_events = taken(client, main_id)
    async with asyncio.timeout(120):
        assert isinstance(await anext(main_events), wire.Output)
    outputs, done = await run_in(client, ["print(6 * 7)"], "beside")
    assert (text(outputs), done.status) == ("42\n", "ok")
    _, done = await run_in(client, ["x = 41"], "beside")
    assert done.status == "ok"
    outputs, done = await run_in(client, ["print(x)"], "beside")
    assert (text(outputs), done.status) == ("41\n", "ok")  # its state carries on

    beside_id = await client.run(
        [SLEEPER], output_limit=10**6, rich_limit=10**7, rich_count_limit=100, kernel="beside"
    )
    beside_events = taken(client, beside_id)
    async with asyncio.timeout(120):
        assert isinstance(await anext(beside_events), wire.Output)
        await client.interrupt("beside")  # the second kernel's run only
        rest = [event async for event in beside_events]
        assert isinstance(rest[-1], wire.Done)
        assert rest[-1].status == "error"
        await client.interrupt()
        ended = [event async for event in main_events]
    assert isinstance(ended[-1], wire.Done)
    assert ended[-1].status == "error"  # interrupted only now
    outputs, done = await run(client, ["print(x)"])  # the first kernel never had x
    assert done.status == "error"
    assert [o.get("ename") for o in outputs if o.get("output_type") == "error"] == ["NameError"]


async def test_a_rekeyed_runner_takes_only_lines_sealed_with_the_new_key(
    sandbox: Sandbox,
) -> None:
    """What a restored snapshot gets before any run: a fresh key (and fresh random
    generators); a line sealed with the old key, numbered above anything sent, no longer
    counts, so nothing sealed for the snapshot or for another clone of it is accepted."""
    old = getattr(getattr(sandbox, "_events", None), "key", b"\0" * 32)
    client = RunnerClient(sandbox)
    rekeyed = await client.rekey(reseed=True)
    assert rekeyed is not None
    assert rekeyed.reseeded
    replayed = wire.Run(id="replayed", cells=("print('old key')",))
    await sandbox._write(wire.seal(old, 10**18, wire.dumps(wire.encode(replayed))))  # type: ignore[attr-defined]
    run_id = await client.run(
        ["print(6 * 7)"], output_limit=10**6, rich_limit=10**7, rich_count_limit=100
    )
    notices, outputs = await notices_and_outputs(client, run_id)
    assert notices == ["unsealed request ignored"]
    assert text(outputs) == "42\n"


async def test_junk_on_the_runners_input_is_ignored_and_said(sandbox: Sandbox) -> None:
    await sandbox.send({"op": "bogus"})
    await sandbox.send({"op": "run", "id": "j", "cells": "not a list"})
    await sandbox._write(b"not sealed at all\n")  # type: ignore[attr-defined]
    client = RunnerClient(sandbox)
    run_id = await client.run(
        ["print(6 * 7)"], output_limit=10**6, rich_limit=10**7, rich_count_limit=100
    )
    notices, outputs = await notices_and_outputs(client, run_id)
    assert notices == [
        "malformed request ignored",
        "malformed request ignored",
        "unsealed request ignored",
    ]
    assert text(outputs) == "42\n"


async def test_a_sessions_file_and_environment_calls_answer(
    backend: SandboxBackend, limits: SandboxLimits
) -> None:
    """What `Session` offers besides runs, on each backend (on the fake too)."""
    async with Executor(
        "contract", limits=limits, backend=backend, pool=PoolSettings(size=0, template=False)
    ) as executor:
        session = executor.session("contract")
        await session.put_files(FILES)
        listed = {(f.path, f.type) for f in await session.files()}
        assert listed == {("in", "dir"), ("in/sales.csv", "file"), ("top.txt", "file")}
        await session.make_dir("out")
        await session.rename("top.txt", "out/top.txt")
        info = await session.info("out/top.txt")
        assert info is not None
        assert info.size == 3
        await session.remove("out")
        assert await session.info("out") is None
        await session.set_env({ENV_NAME: "teal"})
        assert [f.path for f in await session.files()] == ["in", "in/sales.csv"]
