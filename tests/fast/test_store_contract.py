"""Every store on both engines (SQLite files, a PostgreSQL database): what a user of each
relies on, the same answers from either, and the migrations that bring their tables
there."""

from __future__ import annotations

import asyncio

import pytest

from bot.agent.history import History, Summary
from bot.conversations.background_store import BackgroundStore, StoredRun
from bot.conversations.keys import ConversationKey
from bot.conversations.mcp_tokens import TokenStore
from bot.conversations.network import NetworkGrants, NetworkSettings
from bot.conversations.policy import Effective, Policies, PolicySettings, Scope
from bot.conversations.quotas import DAY, HOUR, Quotas, QuotaSettings
from bot.conversations.schedule_store import ScheduleStore, code_digest
from bot.conversations.session_owners import SessionOwners
from bot.database import Databases
from bot.errors import QuotaExceeded
from executor.network_grants import Layer
from executor.ownership import MemoryOwners, Owner
from executor.ownership import SessionOwners as OwnersSeam

NOW = 1_800_000_000.123456
"""Epoch seconds with a fraction: a single-precision column would lose whole minutes."""
THREAD = ConversationKey("discord", "guild-1", "channel-1", "thread-1")
SAME_CHANNEL = ConversationKey("discord", "guild-1", "channel-1", "thread-2")
OTHER_CHANNEL = ConversationKey("discord", "guild-1", "channel-2", "thread-3")


async def test_history_keeps_messages_in_order_and_one_summary(databases: Databases) -> None:
    history = History(databases)
    try:
        await history.append("c1", [{"role": "user", "content": "hi"}])
        await history.append(
            "c1", [{"role": "assistant", "content": "hello"}, {"role": "user", "content": "2"}]
        )
        await history.append("c2", [{"role": "user", "content": "elsewhere ✓"}])
        stored = await history.load("c1")
        assert [m.message["content"] for m in stored] == ["hi", "hello", "2"]
        assert [m.id for m in stored] == sorted(m.id for m in stored)
        assert [m.message["content"] for m in await history.load("c1", after=stored[0].id)] == [
            "hello",
            "2",
        ]
        assert (await history.load("c2"))[0].message == {"role": "user", "content": "elsewhere ✓"}
        assert await history.summary("c1") is None
        first = Summary(stored[0].id, 1, NOW, NOW, "said hi")
        await history.keep_summary("c1", first)
        assert await history.summary("c1") == first
        wider = Summary(stored[1].id, 2, NOW, NOW + 1.5, "said hi, was greeted")
        await history.keep_summary("c1", wider)  # replaces the one it covers
        assert await history.summary("c1") == wider
        await history.forget("c1")
        assert await history.load("c1") == []
        assert await history.summary("c1") is None
        assert len(await history.load("c2")) == 1
    finally:
        history.close()


async def test_history_takes_turns_at_once_from_worker_threads(databases: Databases) -> None:
    history = History(databases)
    try:
        await asyncio.gather(
            *(history.append(f"c{n % 3}", [{"role": "user", "content": str(n)}]) for n in range(30))
        )
        counts = [len(await history.load(f"c{n}")) for n in range(3)]
        assert counts == [10, 10, 10]
    finally:
        history.close()


def test_quotas_count_runs_and_refuse_with_when_to_try_again(databases: Databases) -> None:
    quotas = Quotas(
        databases,
        QuotaSettings(user_runs_per_hour=2, user_sandbox_s_per_day=100, server_runs_per_hour=3),
    )
    try:
        quotas.record("alice", "g1", 60, now=NOW - DAY + HOUR)
        quotas.record("alice", "g1", 30, now=NOW - 50 * 60)
        quotas.check("alice", "g1", now=NOW)
        quotas.record("alice", "g1", 20, now=NOW - 10 * 60)
        with pytest.raises(QuotaExceeded, match=r"2 runs per hour\. Try again in 10 min"):
            quotas.check("alice", "g1", now=NOW)
        with pytest.raises(QuotaExceeded, match=r"100 sandbox-seconds per day"):
            quotas.check("alice", "g1", now=NOW + 51 * 60)
        quotas.record("bob", "g1", 1, now=NOW - 30)
        with pytest.raises(QuotaExceeded, match="this server's limit of 3 runs per hour"):
            quotas.check("carol", "g1", now=NOW)
        quotas.check("carol", "g2", now=NOW)
        top = quotas.top("g1", now=NOW)
        assert [(u.who, u.runs, u.seconds) for u in top] == [("alice", 3, 110.0), ("bob", 1, 1.0)]
        assert quotas.top("g2", now=NOW) == []
        assert [u.who for u in quotas.top(None, limit=1, now=NOW)] == ["alice"]
    finally:
        quotas.close()


def test_policies_apply_by_place_and_the_latest_setting_counts(databases: Databases) -> None:
    policies = Policies(databases, PolicySettings(default="approve"))
    try:
        assert policies.effective(THREAD) == Effective("approve", "the default")
        policies.set(Scope.workspace_of(THREAD), "off", "admin")
        assert policies.effective(OTHER_CHANNEL) == Effective("off", "this workspace")
        policies.set(Scope.channel_of(THREAD), "approve", "admin")
        policies.set(Scope.channel_of(THREAD), "auto", "admin")
        assert policies.effective(THREAD) == Effective("auto", "this channel")
    finally:
        policies.close()
    again = Policies(databases, PolicySettings())
    try:
        assert again.mode(SAME_CHANNEL) == "auto"
        assert again.mode(ConversationKey("discord", "guild-2", "channel-1", "t")) == "auto"
    finally:
        again.close()


def test_network_grants_last_their_layer_and_one_run_grants_are_used_up(
    databases: Databases,
) -> None:
    network = NetworkGrants(databases, NetworkSettings(mode="allowlist", allowed=("pypi.org",)))
    try:
        api = network.parse("api.example.com:8443")
        network.allow(THREAD, network.parse("*.example.org"), once=False, by="U1")
        network.allow(THREAD, api, once=True, by="U1")
        network.allow(THREAD, api, once=True, by="U2")  # given again: one grant, the latest
        grants = network.grants(THREAD)
        assert [(g.layer, g.pattern.host, g.by) for g in grants.grants] == [
            (Layer.OPERATOR, "pypi.org", ""),
            (Layer.CHANNEL, "example.org", "U1"),
            (Layer.ONCE, "api.example.com", "U2"),
        ]
        assert grants.allows("files.example.org", 443)
        assert grants.allows("api.example.com", 8443)
        assert not grants.allows("api.example.com", 443)
        # The channel's grant reaches its other threads; the one-run grant does not.
        assert network.grants(SAME_CHANNEL).allows("x.example.org", 443)
        assert not network.grants(SAME_CHANNEL).allows("api.example.com", 8443)
        assert not network.grants(OTHER_CHANNEL).allows("x.example.org", 443)
        network.begin_run(THREAD)
        late = network.parse("late.example.net")
        network.allow(THREAD, late, once=True, by="U1")  # during the run: lasts through it
        network.end_run(THREAD)
        after = network.grants(THREAD)
        assert not after.allows("api.example.com", 8443)
        assert after.allows("late.example.net", 443)
        assert network.deny(THREAD, network.parse("example.org")) == 0  # not the wildcard
        assert network.deny(THREAD, network.parse("*.example.org")) == 1
        assert not network.grants(THREAD).allows("x.example.org", 443)
        network.begin_run(THREAD)  # a run that the process's end cuts short
    finally:
        network.close()
    again = NetworkGrants(databases, NetworkSettings(mode="allowlist"))
    try:
        assert not again.grants(THREAD).allows("late.example.net", 443)
    finally:
        again.close()


def test_network_traffic_adds_up_per_host_and_server(databases: Databases) -> None:
    network = NetworkGrants(databases, NetworkSettings(mode="allowlist"))
    try:
        big = 3_000_000_000  # more than 32 bits
        network.record(THREAD, "pypi.org", 443, "allowed", 3, big, now=NOW)
        network.record(SAME_CHANNEL, "pypi.org", 443, "allowed", 2, big, now=NOW)
        network.record(THREAD, "evil.example", 443, "refused", now=NOW)
        elsewhere = ConversationKey("discord", "guild-2", "channel-1", "t")
        network.record(elsewhere, "other.org", 80, "allowed", now=NOW)
        network.record(THREAD, "old.org", 443, "allowed", now=NOW - DAY - 1)
        shown = network.traffic("guild-1", now=NOW)
        assert [(t.host, t.port, t.verdict, t.requests, t.bytes) for t in shown] == [
            ("pypi.org", 443, "allowed", 5, 2 * big),
            ("evil.example", 443, "refused", 1, 0),
        ]
        assert {t.host for t in network.traffic(None, now=NOW)} == {
            "pypi.org",
            "evil.example",
            "other.org",
        }
        with pytest.raises(ValueError, match="verdict"):
            network.record(THREAD, "x.org", 443, "maybe")  # type: ignore[arg-type]
    finally:
        network.close()


def test_schedules_are_kept_found_due_and_updated(databases: Databases) -> None:
    store = ScheduleStore(databases)
    try:
        cells = ["print('hi')", "x = 1"]
        first = store.add(
            "c1", "alice", "g1", "every day at 9", "0 9 * * *", "UTC", cells, NOW, NOW
        )
        second = store.add(
            "c2", "alice", "g1", "hourly", "0 * * * *", "UTC", ["1"], NOW, NOW + 60, "bob"
        )
        third = store.add("c1", "carol", "g1", "hourly", "0 * * * *", "UTC", ["2"], NOW, NOW + 5)
        assert first.id < second.id < third.id
        assert store.get(first.id) == first
        assert first.created == NOW
        assert first.next_due == NOW
        assert (first.approved, second.approved) == ("", code_digest(["1"]))
        assert second.approved_now
        assert second.approved_by == "bob"
        assert [s.id for s in store.of_conversation("c1")] == [first.id, third.id]
        assert [s.id for s in store.of_owner("alice")] == [first.id, second.id]
        assert [s.id for s in store.due(NOW + 10)] == [first.id, third.id]
        assert store.next_due() == NOW
        # Two replicas sharing the tables: one of them runs a due time, once.
        replica = ScheduleStore(databases)
        try:
            assert store.claim_due(first.id, NOW, NOW + 3600)
            assert not replica.claim_due(first.id, NOW, NOW + 3600)
        finally:
            replica.close()
        assert store.next_due() == NOW + 5
        store.approve(first.id, cells, "admin")
        assert store.get(first.id).approved_now  # type: ignore[union-attr]
        store.set_cells(first.id, ["print('changed')"])
        changed = store.get(first.id)
        assert changed is not None
        assert changed.cells == ["print('changed')"]
        assert not changed.approved_now
        store.ran(first.id, NOW + 3600, "out: 1%", [("chart.png", "https://x/a?b=1%20")])
        store.ran(first.id, NOW + 7200, "out: 2", [])
        ran = store.get(first.id)
        assert ran is not None
        assert (ran.runs, ran.last_run, ran.last_text, ran.last_images) == (
            2,
            NOW + 7200,
            "out: 2",
            [],
        )
        store.remove(first.id)
        assert store.get(first.id) is None
        assert store.get(999_999) is None
    finally:
        store.close()
    again = ScheduleStore(databases)
    try:
        assert [s.id for s in again.due(NOW + 100)] == [third.id, second.id]
    finally:
        again.close()


def test_background_runs_are_kept_per_platform_until_removed(databases: Databases) -> None:
    store = BackgroundStore(databases)
    try:
        run = StoredRun("stop-1", "discord:g:c:t", "alice", "g", "print(1)", "run-a", NOW, 3600.0)
        store.add(run)
        store.add(StoredRun("stop-2", "slack:T:C:1.2", "bob", "T", "x", "run-b", NOW + 1, 60.0))
        store.add(StoredRun("stop-3", "discord_x:g:c", "eve", "g", "y", "run-c", NOW + 2, 60.0))
        assert store.of_platform("discord") == [run]
        moved = StoredRun("stop-1", "discord:g:c:t", "alice", "g", "print(1)", "run-z", NOW, 10.0)
        store.add(moved)  # the same Stop key: replaced, not doubled
        assert store.of_platform("discord") == [moved]
        store.remove("stop-1")
        store.remove("never")
        assert store.of_platform("discord") == []
        assert [r.run_id for r in store.of_platform("slack")] == ["run-b"]
    finally:
        store.close()


def test_mcp_tokens_are_issued_checked_and_revoked(databases: Databases) -> None:
    tokens = TokenStore(databases)
    try:
        first, grant = tokens.issue("U1", "Alice", "discord:g:c:t", "g")
        second, other = tokens.issue("U1", "Alice", "discord:g:c:u")
        theirs, _ = tokens.issue("U2", "Bob", "slack:T:C:1")
        assert first.startswith("cm_")
        assert first != second
        assert tokens.find(first) == grant
        assert tokens.find("cm_never-issued") is None
        assert [g.id for g in tokens.of("U1")] == [grant.id, other.id]
        assert tokens.live() == 3
        assert tokens.revoke("U1", other.id) == 1
        assert tokens.revoke("U1", other.id) == 0
        assert tokens.revoke("U2", grant.id) == 0  # not theirs
        found = tokens.find(second)
        assert found is not None
        assert found.revoked > 0
        assert tokens.revoke("U1") == 1
        assert tokens.of("U1") == []
        assert tokens.live() == 1
        assert tokens.find(theirs) is not None
    finally:
        tokens.close()


def test_session_owners_hand_a_session_over_by_compare_and_set(databases: Databases) -> None:
    first, second = SessionOwners(databases, "replica-a"), SessionOwners(databases, "replica-b")
    try:
        check_session_owners(first, second)
    finally:
        first.close()
        second.close()
    again = SessionOwners(databases, "replica-b")
    try:
        assert again.mine() == {"k1": "sandbox-1"}  # a restarted replica finds its own
    finally:
        again.close()


def test_the_memory_ledger_answers_as_the_stored_one() -> None:
    first = MemoryOwners("replica-a")
    check_session_owners(first, first.sharing("replica-b"))


def check_session_owners(first: OwnersSeam, second: OwnersSeam) -> None:
    """What the executor relies on of a ledger, seen by two replicas."""
    assert first.owner("k1") is None
    first.record("k1", "sandbox-1")
    first.record("k2", "sandbox-2")
    assert second.owner("k1") == Owner("sandbox-1", "replica-a")
    assert first.mine() == {"k1": "sandbox-1", "k2": "sandbox-2"}
    assert second.others() == {"sandbox-1", "sandbox-2"}
    assert first.others() == set()
    # Taking over: only from the replica and sandbox the ledger names, and only once.
    assert not second.take("k1", "sandbox-9", "replica-a")
    assert not second.take("k1", "sandbox-1", "replica-c")
    assert second.take("k1", "sandbox-1", "replica-a")
    assert not second.take("k1", "sandbox-1", "replica-a")
    assert first.owner("k1") == Owner("sandbox-1", "replica-b")
    assert first.others() == {"sandbox-1"}
    assert first.mine() == {"k2": "sandbox-2"}
    assert first.named() == second.named() == {"sandbox-1", "sandbox-2"}  # whoever holds it
    assert first.take("k2", "sandbox-2", "replica-a")  # still its own: kept, by the same check
    assert first.mine() == {"k2": "sandbox-2"}
    # A take that could not attach gives the session back, once, to the one it names.
    assert not first.give_back("k1", "sandbox-1", "replica-a")
    assert second.give_back("k1", "sandbox-1", "replica-a")
    assert not second.give_back("k1", "sandbox-1", "replica-a")
    assert second.owner("k1") == Owner("sandbox-1", "replica-a")
    assert second.take("k1", "sandbox-1", "replica-a")
    # The replica that lost it may not end it; the one that holds it may, once.
    assert not first.release("k1", "sandbox-1")
    assert second.owner("k1") == Owner("sandbox-1", "replica-b")
    assert not second.release("k2", "sandbox-2")
    assert first.release("k2", "sandbox-2")
    assert not first.release("k2", "sandbox-2")
    assert second.owner("k2") is None
    # A new session of a key replaces whatever held it before.
    first.record("k2", "sandbox-3")
    second.record("k2", "sandbox-4")
    assert first.owner("k2") == Owner("sandbox-4", "replica-b")
    assert not first.release("k2", "sandbox-3")
    assert second.release("k2", "sandbox-4")
    assert second.mine() == {"k1": "sandbox-1"}
