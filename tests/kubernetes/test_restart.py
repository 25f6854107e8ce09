"""A bot restart keeps live sessions on Pods: with a session secret that stays the same, the
next process attaches to its sessions' Pods again (variables and files kept, and its first
run says so); without that secret, or with another one, it cannot speak to them and removes
them. Pooled Pods, which hold no session, never outlive the process."""

from __future__ import annotations

import asyncio
import contextlib
import secrets

import pytest
from kubernetes import client as k8s

from bot.sandbox_words import spoken
from executor import Executor, PoolSettings, Status
from executor.errors import SandboxTaken
from executor.kubernetes_backend import KubernetesSandbox
from executor.ownership import MemoryOwners
from executor.runner_client import RunnerClient
from tests.kubernetes.conftest import (
    NAMESPACE,
    TEST_INSTANCE,
    make_executor,
    sandbox_pods,
    wait_until,
)

pytestmark = pytest.mark.kubernetes

SECRET = secrets.token_hex(32)
RESUMED = "The bot restarted since the last run"


async def crash(executor: Executor) -> None:
    """What a killed bot process leaves: its Pods running, nothing deleted or told."""
    tasks = [executor.pool._refill, executor.sessions._reaper, *executor.pool._tasks]
    for task in tasks:
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
    for live in executor.sessions._live.values():
        assert isinstance(live.lease.sandbox, KubernetesSandbox)
        live.lease.sandbox.detach()
    await executor.backend.close()


async def test_sessions_carry_on_across_a_restart_and_only_with_the_secret(
    bot_kubeconfig: str, admin: k8s.ApiClient, runtime: str
) -> None:
    async with make_executor(
        bot_kubeconfig, runtime, pool=PoolSettings(size=1), session_secret=SECRET
    ) as first:
        await wait_until(lambda: first.pool.ready == 1)
        a = await first.session("conv-a").run(
            "x = 41\nopen('kept.txt', 'w').write('still here')\nprint('set')"
        )
        assert a.status is Status.OK, a.message
        b = await first.session("conv-b").run("y = 'b'\nprint('set')")
        assert b.status is Status.OK, b.message
        kept = {live.lease.sandbox.id for live in first.sessions._live.values()}
    await wait_until(lambda: set(sandbox_pods(admin)) == kept)  # the pooled Pod went

    async with make_executor(bot_kubeconfig, runtime, session_secret=SECRET) as second:
        assert sorted(second.sessions.active) == ["conv-a", "conv-b"]
        again = spoken(await second.session("conv-a").run("print(x + 1, open('kept.txt').read())"))
        assert again.status is Status.OK, again.message
        assert again.stdout == "42 still here\n"
        assert again.message.startswith(RESUMED)
        assert not again.session_restarted
        other = await second.session("conv-b").run("print(y, 'x' in dir())")
        assert other.stdout == "b False\n"  # each Pod came back to its own conversation
        follow_up = spoken(await second.session("conv-a").run("print(x)"))
        assert follow_up.stdout == "41\n"
        assert RESUMED not in follow_up.message
    assert set(sandbox_pods(admin)) == kept

    # A process with another secret cannot make the Pods' keys, gets no answer it can
    # trust from them, and removes them: the sessions start afresh.
    another = secrets.token_hex(32)
    async with make_executor(bot_kubeconfig, runtime, session_secret=another) as third:
        assert third.sessions.active == []
        assert sandbox_pods(admin) == []
        fresh = spoken(await third.session("conv-a").run("print('x' in dir())"))
        assert fresh.stdout == "False\n"
        assert RESUMED not in fresh.message
        await third.session("conv-a").close()


async def test_a_session_whose_bot_crashed_mid_run_carries_on_interrupted(
    bot_kubeconfig: str, admin: k8s.ApiClient
) -> None:
    lost = make_executor(bot_kubeconfig, session_secret=SECRET, timeout_s=120)
    await lost.__aenter__()
    await lost.session("conv-c").run("x = 'before'")
    running = asyncio.create_task(
        lost.session("conv-c").run("import time\nx = 'during'\ntime.sleep(600)")
    )
    await asyncio.sleep(3)  # the sleep has started
    running.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await running
    await crash(lost)
    assert len(sandbox_pods(admin)) == 1

    async with make_executor(bot_kubeconfig, session_secret=SECRET) as restarted:
        assert restarted.sessions.active == ["conv-c"]
        result = spoken(await restarted.session("conv-c").run("print(x)"))
        assert result.status is Status.OK, result.message
        assert result.stdout == "during\n"  # the sleep was interrupted, the state kept
        assert result.message.startswith(RESUMED)
        await restarted.session("conv-c").close()
    await wait_until(lambda: sandbox_pods(admin) == [])


def left_behind(admin: k8s.ApiClient, other: str, ours: list[str]) -> None:
    """After a test of two replicas: none of its Pods is left (those that are, after a
    failure, are deleted: only this test's, by name or by the second replica's label)."""
    api = k8s.CoreV1Api(admin)
    found = {name for name in sandbox_pods(admin) if name in ours} | set(sandbox_pods(admin, other))
    for name in found:
        with contextlib.suppress(k8s.ApiException):
            api.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)
    assert not found, f"Pods left behind: {sorted(found)}"


def with_ledger(executor: Executor, owners: MemoryOwners) -> Executor:
    """An executor of a replica that shares the session ledger (a database's, in the bot)."""
    executor.owners = executor.sessions.owners = owners
    return executor


async def test_a_live_session_moves_to_another_replica_and_the_first_leaves_it_running(
    bot_kubeconfig: str, admin: k8s.ApiClient
) -> None:
    other = f"{TEST_INSTANCE}-b"
    ledger = MemoryOwners(TEST_INSTANCE)
    theirs = ledger.sharing(other)
    pods: list[str] = []
    a = with_ledger(make_executor(bot_kubeconfig, session_secret=SECRET), ledger)
    b = with_ledger(make_executor(bot_kubeconfig, instance=other, session_secret=SECRET), theirs)
    try:
        async with a, b:
            made = await a.session("conv").run(
                "x = 41\nopen('kept.txt', 'w').write('still here')\nprint('set')"
            )
            assert made.status is Status.OK, made.message
            held_by_a = a.sessions._live["conv"].lease.sandbox
            pod = held_by_a.id
            pods.append(pod)
            # A's reaper also asks the ledger every few seconds and lets go of what another
            # replica took; with the key's lock held it leaves the session to A's stream.
            busy = a.sessions.lock("conv")
            await busy.acquire()
            read = spoken(await b.session("conv").run("print(x + 1, open('kept.txt').read())"))
            assert read.status is Status.OK, read.message
            assert read.stdout == "42 still here\n"
            assert not read.session_restarted
            assert RESUMED not in read.message
            assert sandbox_pods(admin, other) == []  # no Pod started for B
            # What A's stream heard of B's `resume` is B's traffic, not a forgery: A is told
            # another replica took the session over, and stops nothing.
            with pytest.raises(SandboxTaken):
                await RunnerClient(held_by_a, timeout_s=20).export()
            busy.release()
            # A's reaper, past every idle timeout, only lets go of what B holds now.
            a.sessions.idle_timeout_s = 0.001
            await a.sessions.reap()
            await a.sessions.settle()  # what A ended in the background is done
            await asyncio.gather(*a.pool._tasks)
            assert a.sessions.active == []
            again = await b.session("conv").run("print(x)")
            assert again.stdout == "41\n", again.message
            assert pod in sandbox_pods(admin)
            await b.session("conv").close()  # B holds it: B may end it
            await wait_until(lambda: pod not in sandbox_pods(admin))
    finally:
        left_behind(admin, other, pods)


async def test_a_session_taken_over_stays_with_its_replica_across_both_restarts(
    bot_kubeconfig: str, admin: k8s.ApiClient
) -> None:
    other = f"{TEST_INSTANCE}-b"
    ledger = MemoryOwners(TEST_INSTANCE)
    theirs = ledger.sharing(other)

    pods: list[str] = []

    def replica_a() -> Executor:
        return with_ledger(make_executor(bot_kubeconfig, session_secret=SECRET), ledger)

    def replica_b() -> Executor:
        made = make_executor(bot_kubeconfig, instance=other, session_secret=SECRET)
        return with_ledger(made, theirs)

    try:
        async with replica_b() as b:
            async with replica_a() as a:
                made = await a.session("conv").run("x = 41\nprint('set')")
                assert made.status is Status.OK, made.message
                pod = a.sessions._live["conv"].lease.sandbox.id
                pods.append(pod)
                assert (await b.session("conv").run("print(x)")).stdout == "41\n"
            # A stopped without ending it, and starts again while B holds it (labelled A's):
            # it neither attaches to it nor deletes it.
            async with replica_a() as a:
                assert a.sessions.active == []
                assert pod in sandbox_pods(admin)
                again = await b.session("conv").run("print(x)")
                assert again.stdout == "41\n", again.message
        assert pod in sandbox_pods(admin)  # B kept it for its next start
        async with replica_a() as a, replica_b() as b:
            assert a.sessions.active == []
            assert b.sessions.active == ["conv"]  # found by the ledger, not by its label
            back = spoken(await b.session("conv").run("print(x + 1)"))
            assert back.stdout == "42\n", back.message
            assert back.message.startswith(RESUMED)
            await b.session("conv").close()
            await wait_until(lambda: pod not in sandbox_pods(admin))
    finally:
        left_behind(admin, other, pods)
