"""Three replicas of the bot in the test cluster (tests/kubernetes/ha_cluster.py): Slack
in HTTP mode through their Service, Discord through one gateway shard each, PostgreSQL
shared.

- 100 mentions across 20 conversations are each answered exactly once, and follow-ups keep
  the session's variables whichever replica takes them;
- the replica running a turn is deleted: the thread is told, and the next message works with
  the variables intact;
- a rolling update during traffic loses no conversation."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator

import pytest
from kubernetes import client as k8s

from bench.standins import discord_server as dc
from bench.standins import slack_server as sl
from tests.kubernetes.conftest import KUBECONFIG, TEST_INSTANCE
from tests.kubernetes.ha_cluster import (
    ANSWER_S,
    DONE,
    REPLICAS,
    STOPPED,
    Cluster,
    discord_conversation,
    failover,
    lost_session,
    running_cluster,
    slack_conversation,
    slack_user,
    told_to_user,
    until,
    values,
)
from tests.kubernetes.replicas import SHUTDOWN_GRACE_S

pytestmark = [pytest.mark.kubernetes, pytest.mark.serial, pytest.mark.timeout(1500)]

DISCORD_PEOPLE = (dc.ALICE, dc.BOB, dc.CAROL, dc.OWNER)
"""One person a conversation: a person's turns wait for each other (and a few at most)."""


@pytest.fixture(scope="module")
async def cluster(
    admin: k8s.ApiClient, deployed: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Cluster]:
    logs = tmp_path_factory.mktemp("replica-logs")
    async with running_cluster(admin, KUBECONFIG, logs, f"{TEST_INSTANCE}-ha") as made:
        print(f"the replicas' logs, as they were written: {logs / 'followed'}")
        yield made


async def test_a_hundred_mentions_across_twenty_conversations_are_each_answered_once(
    cluster: Cluster,
) -> None:
    slack_starts = [100 * n for n in range(1, 17)]
    discord_starts = [5000 + 100 * n for n in range(1, 5)]
    follow_ups = 4
    roots, threads = await asyncio.gather(
        asyncio.gather(*(slack_conversation(cluster, s, follow_ups) for s in slack_starts)),
        asyncio.gather(
            *(
                discord_conversation(cluster, s, follow_ups, author)
                for s, author in zip(discord_starts, DISCORD_PEOPLE, strict=True)
            )
        ),
    )
    # Late duplicates (a retried delivery, a re-dispatched event) would come within seconds.
    await asyncio.sleep(0)
    for start, root in zip(slack_starts, roots, strict=True):
        texts = cluster.slack_texts(root)
        assert cluster.slack_done(root) == 1 + follow_ups, texts
        assert values(texts)[-1] == start + follow_ups, texts
        assert sorted(set(values(texts))) == list(range(start, start + follow_ups + 1)), texts
    for start, thread in zip(discord_starts, threads, strict=True):
        texts = cluster.discord_texts(thread)
        assert cluster.discord_done(thread) == 1 + follow_ups, texts
        assert sorted(set(values(texts))) == list(range(start, start + follow_ups + 1)), texts
    # The Service spread Slack's requests: conversations moved between replicas, and kept
    # their variables all the same.
    moved = [root for root in roots if len(cluster.replicas.served(root)) > 1]
    assert moved, "no Slack conversation was served by more than one replica"
    busy = {pod for root in roots for pod in cluster.replicas.served(root)}
    assert len(busy) == REPLICAS, busy


async def test_deleting_the_replica_running_a_turn_tells_the_thread_and_the_next_message_works(
    cluster: Cluster,
) -> None:
    """Once here; `python -m bench failover` runs it CELLMATE_FAILOVER_SAMPLES times and
    takes the times it prints."""
    for sample in range(int(os.environ.get("CELLMATE_FAILOVER_SAMPLES", "1"))):
        start = 9000 + 100 * sample
        root, victim, seconds = await failover(cluster, start)
        texts = cluster.slack_texts(root)
        assert any(STOPPED in text for text in texts), texts
        assert values(texts)[-1] == start + 1, texts
        assert not any("NameError" in text for text in texts), texts
        assert cluster.slack_done(root) == 2, texts
        measured = {
            "victim": victim,
            "seconds": round(seconds, 2),
            "replicas": REPLICAS,
            "grace_s": SHUTDOWN_GRACE_S,
        }
        print(f"failover sample: {json.dumps(measured)}")
        await cluster.replicas.wait_ready()


async def test_a_rolling_update_during_traffic_loses_no_conversation(cluster: Cluster) -> None:
    starts = [20000 + 100 * n for n in range(4)]
    before = cluster.replicas.revision()
    rolled = asyncio.Event()
    after_roll = 2
    """Messages each conversation still sends once every replica was replaced."""

    def finals(root: str, user: str) -> int:
        """A message's one answer: the model's, or why it could not be run."""
        shown = cluster.slack_texts(root) + told_to_user(cluster, user)
        return sum(
            DONE in text or STOPPED in text or "takes no new requests" in text for text in shown
        )

    async def traffic(start: int, root: str) -> tuple[str, int]:
        user = slack_user(start)
        sent, left = 1, after_roll
        while left:
            if rolled.is_set():
                left -= 1
            _, deliveries = await cluster.slack.post(
                sl.C_GENERAL, "add one", thread_ts=root, mention_bot=True, user=user
            )
            assert all(d.status == 200 for d in deliveries), deliveries
            sent += 1
            await until(
                lambda sent=sent: finals(root, user) >= sent,
                ANSWER_S,
                f"message {sent} in {root} unanswered during the update",
                cluster,
            )
        return root, sent

    async def update() -> None:
        await asyncio.sleep(0)  # the conversations go on first
        cluster.replicas.roll()
        await until(lambda: cluster.replicas.revision() != before, 60, "no new revision", cluster)
        await cluster.replicas.wait_rolled(cluster.replicas.revision())
        rolled.set()

    roots = await asyncio.gather(*(slack_conversation(cluster, start, 0) for start in starts))
    conversations, _ = await asyncio.gather(
        asyncio.gather(*(traffic(start, root) for start, root in zip(starts, roots, strict=True))),
        update(),
    )
    for start, (root, sent) in zip(starts, conversations, strict=True):
        user = slack_user(start)
        texts = cluster.slack_texts(root)
        assert finals(root, user) == sent, texts
        if any("NameError" in text for text in texts):  # raised whole: pytest would shorten it
            raise AssertionError(lost_session(cluster, root, texts))
        seen = values(texts)
        assert seen[0] == start, texts
        assert seen == sorted(seen), texts  # never back to an earlier value
        assert seen[-1] >= start + after_roll, texts
