"""Several replicas of the bot in the test cluster, deployed from the HA overlay
(deploy/kubernetes/ha) and sharing PostgreSQL, with what the tests and the failover
benchmark do to them: Slack in HTTP mode reaches them through their Service (the API
server's proxy to it, as the kit has no kube-proxy: it sends each request to one ready
replica), Discord through one gateway shard per replica.

The stand-ins listen on loopback; the Pods reach them through relays on the pod bridge
inside the kit's network namespace (tests/kubernetes/kit_network.py). PostgreSQL is
Debian's server, started here on loopback and relayed the same way."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import re
import secrets
import ssl
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import psycopg
import yaml
from kubernetes import client as k8s

from bench.standins import discord_server as dc
from bench.standins import slack_server as sl
from bench.standins.openai_server import Reply, runs, says
from bench.standins.slack_server.world import Delivery
from bot.ops.images import build_bot_image
from executor.docker_backend import connect
from tests.compose.relay import (
    ComposeDiscord,
    ComposeModel,
    ComposeSlack,
    stand_in_settings,
    user_text,
)
from tests.kubernetes.kit_network import KitRelay
from tests.kubernetes.replicas import BOT_NAMESPACE, NAME, Replicas, load_image
from tests.support.postgres import Postgres

REPLICAS = 3
DONE = "Done, see above."
ANSWER_S = 300.0
"""How long one answer may take on a loaded machine (a sandbox Pod's start included)."""
STOPPED = "turn was stopped"
"""What a thread is told when the replica running its turn shuts down."""


def respond(body: dict[str, Any]) -> Reply:
    """The model: sets x, adds one to it, or waits, as the message asks."""
    last = body["messages"][-1]
    if last["role"] == "tool":
        return says(DONE)
    text = user_text(last)
    if start := re.search(r"start at (\d+)", text):
        return runs(f"x = {start.group(1)}\nprint('x is', x)")
    if "add one" in text:
        return runs("x += 1\nprint('x is', x)")
    if "wait" in text:
        return runs("import time\nprint('waiting', flush=True)\ntime.sleep(600)\nprint('waited')")
    return says("I did not understand.")


class ServiceSlack(ComposeSlack):
    """Slack in HTTP mode, posting to the bot's Service through the API server's proxy
    (with the admin's token and the cluster's CA), as a load balancer in front of it would."""

    def __init__(self, kubeconfig: dict[str, Any]) -> None:
        super().__init__(mode="http")
        cluster = kubeconfig["clusters"][0]["cluster"]
        user = kubeconfig["users"][0]["user"]
        self.ssl = ssl.create_default_context()
        if "certificate-authority-data" in cluster:
            pem = base64.b64decode(cluster["certificate-authority-data"]).decode()
            self.ssl.load_verify_locations(cadata=pem)
        else:
            self.ssl.load_verify_locations(cafile=cluster["certificate-authority"])
        self.token = str(user["token"])
        self.bot_url = (
            f"{cluster['server']}/api/v1/namespaces/{BOT_NAMESPACE}/services/"
            f"{NAME}:http/proxy/slack/events"
        )

    async def _post_to_bot(
        self, body: bytes, headers: dict[str, str], payload: dict[str, Any], kind: str
    ) -> Delivery:
        """As Slack delivers an event: again at once when the app answered with an error
        (a replica shutting down says 503), up to three times."""
        delivery = await super()._post_to_bot(body, headers, payload, kind)
        for attempt in range(1, 4):
            if kind != "events_api" or delivery.status < 500:
                break
            await asyncio.sleep(attempt - 1)
            retried = {**headers, "X-Slack-Retry-Num": str(attempt)}
            retried["X-Slack-Retry-Reason"] = "http_error"
            delivery = await super()._post_to_bot(body, retried, payload, kind)
        return delivery

    async def start(self) -> None:
        await super().start()
        assert self._session is not None
        await self._session.close()
        self._session = aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {self.token}"},
            connector=aiohttp.TCPConnector(ssl=self.ssl),
        )


@dataclass
class Cluster:
    replicas: Replicas
    slack: ServiceSlack
    discord: ComposeDiscord
    model: ComposeModel
    postgres: Postgres
    database: str
    logs: Path

    def slack_answers(self, root: str) -> list[str]:
        return [
            m.text
            for m in self.slack.channel_messages(sl.C_GENERAL, thread_ts=root, by_bot=True)
            if DONE in m.text or "x is" in m.text or "stopped" in m.text
        ]

    def slack_texts(self, root: str) -> list[str]:
        return [
            m.text for m in self.slack.channel_messages(sl.C_GENERAL, thread_ts=root, by_bot=True)
        ]

    def slack_done(self, root: str) -> int:
        return sum(DONE in text for text in self.slack_texts(root))

    def discord_texts(self, thread: int) -> list[str]:
        return [m.content for m in self.discord.channel_messages(thread, by_bot=True)]

    def discord_done(self, thread: int) -> int:
        return sum(DONE in text for text in self.discord_texts(thread))

    def leases(self, thread: str = "") -> list[str]:
        """The holders of the turn leases not lapsed (of the conversations ending in
        `thread`, when given)."""
        with psycopg.connect(self.database) as db:
            rows = db.execute(
                "SELECT holder FROM turn_leases WHERE expires >= extract(epoch from now()) "
                "AND conversation LIKE %s",
                (f"%{thread}",),
            ).fetchall()
        return [str(row[0]) for row in rows]


@contextlib.asynccontextmanager
async def running_cluster(
    admin: k8s.ApiClient, kubeconfig_path: str, logs: Path, instance: str
) -> AsyncIterator[Cluster]:
    """The bot's image loaded, the stand-ins and PostgreSQL relayed into the kit, and the
    replicas deployed and ready (Discord's shards connected); all removed again after."""
    docker = connect(timeout=900)
    try:
        image = build_bot_image(docker, mirror="http://deb.debian.org/debian")
    finally:
        docker.close()
    load_image(image)
    kubeconfig = yaml.safe_load(Path(kubeconfig_path).read_text())  # noqa: ASYNC240
    postgres = Postgres().start()
    model, slack, discord = ComposeModel(), ServiceSlack(kubeconfig), ComposeDiscord()
    model.responder = respond
    replicas = Replicas(admin, image, instance, REPLICAS)
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(postgres.close)
        await model.start()
        stack.push_async_callback(model.stop)
        await slack.start()
        stack.push_async_callback(slack.close)
        await discord.start()
        stack.push_async_callback(discord.close)
        for server in (model, slack, discord):
            relay = await KitRelay(server.port).start()
            stack.push_async_callback(relay.close)
            server.public_url = relay.url
        database = postgres.create_database()
        pg_relay = await KitRelay(postgres.port).start()
        stack.push_async_callback(pg_relay.close)
        in_cluster_url = database.replace(
            f"127.0.0.1:{postgres.port}", f"{pg_relay.host}:{pg_relay.port}"
        )
        secrets_ = {
            **stand_in_settings(model, slack, discord),
            "CELLMATE_DATABASE_URL": in_cluster_url,
            "CELLMATE_SESSION_SECRET": secrets.token_hex(32),
        }
        stack.push_async_callback(replicas.remove)
        replicas.deploy(secrets_, {"CELLMATE_DISCORD_SHARD_COUNT": str(REPLICAS)})
        stack.callback(replicas.follow_logs(logs / "followed").set)
        try:
            await replicas.wait_ready()
            await discord.wait_ready(120, shards=REPLICAS)
        except AssertionError as failed:
            raise AssertionError(f"{failed}\n{replicas.describe()}") from None
        yield Cluster(replicas, slack, discord, model, postgres, database, logs)


async def until(
    predicate: Any, seconds: float, what: str, cluster: Cluster, seen: Any = None
) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            cluster.replicas.keep_logs(cluster.logs)
            shown = seen() if seen is not None else ""
            raise AssertionError(
                f"{what} after {seconds:g} s (the replicas' logs: {cluster.logs})\n{shown}\n"
                f"{cluster.replicas.describe()}"
            )
        await asyncio.sleep(0.5)


STARTS_AND_SWEEPS = ("did not answer", "sandbox is gone", "removed", "session(s)")
"""What replicas log about sessions found, kept, given up or swept at a start or stop."""


def lost_session(cluster: Cluster, root: str, texts: list[str]) -> str:
    """Why a conversation lost its variables, for the failure's report: its whole thread,
    and what the replicas logged about its session, and their starts and sweeps."""
    lines = [
        f"{log.stem}: {line[:300]}"
        for log in sorted((cluster.logs / "followed").glob("*.log"))
        for line in log.read_text(errors="replace").splitlines()
        if root in line or any(word in line for word in STARTS_AND_SWEEPS)
    ]
    thread = "\n---\n".join(texts)
    story = "\n".join(lines[-120:])
    return f"the thread:\n{thread}\n\nthe replicas' logs about it:\n{story}"


def slack_user(start: int) -> str:
    """A person of their own for each conversation: one person's turns wait for each other."""
    return f"U0PERSON{start}"


async def slack_conversation(cluster: Cluster, start: int, follow_ups: int) -> str:
    """A thread: "start at N", then follow-ups adding one, each after the last answer."""
    user = slack_user(start)
    asked, deliveries = await cluster.slack.post(
        sl.C_GENERAL, f"start at {start}", mention_bot=True, user=user
    )
    assert [d.status for d in deliveries] == [200] * len(deliveries), deliveries
    root = asked.ts

    def seen() -> str:
        return f"deliveries: {deliveries}\nthe thread: {cluster.slack_texts(root)}"

    await until(
        lambda: cluster.slack_done(root) >= 1, ANSWER_S, f"no answer in {root}", cluster, seen
    )
    for step in range(1, follow_ups + 1):
        _, deliveries = await cluster.slack.post(
            sl.C_GENERAL, "add one", thread_ts=root, mention_bot=True, user=user
        )
        assert all(d.status == 200 for d in deliveries), deliveries
        await until(
            lambda step=step: cluster.slack_done(root) >= step + 1,
            ANSWER_S,
            f"follow-up {step} in {root} unanswered",
            cluster,
            seen,
        )
    return root


async def discord_conversation(cluster: Cluster, start: int, follow_ups: int, author: int) -> int:
    asked = await cluster.discord.post_message(
        dc.CHANNEL_GENERAL, f"start at {start}", mention_bot=True, author=author
    )

    def thread() -> int | None:
        for thread_id in list(cluster.discord.threads):
            texts = cluster.discord_texts(thread_id)
            if start in values(texts) and cluster.discord_done(thread_id):
                return int(thread_id)
        return None

    await until(lambda: thread() is not None, ANSWER_S, f"no Discord answer to {asked.id}", cluster)
    found = thread()
    assert found is not None
    for step in range(1, follow_ups + 1):
        await cluster.discord.post_message(found, "add one", mention_bot=True, author=author)
        await until(
            lambda step=step: cluster.discord_done(found) >= step + 1,
            ANSWER_S,
            f"Discord follow-up {step} in {found} unanswered",
            cluster,
        )
    return found


def values(texts: list[str]) -> list[int]:
    return [int(v) for text in texts for v in re.findall(r"x is (\d+)", text)]


def running_replica(cluster: Cluster, thread: str) -> str | None:
    """The replica holding the thread's turn lease now (a holder is `host:pid/turn`; the
    host is the Pod's name)."""
    holders = cluster.leases(thread)
    return holders[0].split(":", 1)[0] if holders else None


def told_to_user(cluster: Cluster, user: str) -> list[str]:
    """What only `user` was shown (ephemeral messages)."""
    return [str(e.get("text")) for e in cluster.slack.ephemeral if e.get("user") == user]


async def failover(cluster: Cluster, start: int) -> tuple[str, str, float]:
    """A conversation with x = start runs a long turn; the replica running it is deleted
    (as `kubectl delete pod` does: it drains and stops the turn). Returns the thread, the
    replica, and the seconds from the deletion to the next message's answer."""
    user = slack_user(start)
    root = await slack_conversation(cluster, start, 0)
    await cluster.slack.post(
        sl.C_GENERAL, "wait for it", thread_ts=root, mention_bot=True, user=user
    )

    def running() -> bool:
        return any("waiting" in text for text in cluster.slack_texts(root))

    await until(running, ANSWER_S, "the long run did not start", cluster)
    victim = running_replica(cluster, root)
    assert victim is not None, cluster.leases()
    deleted = time.monotonic()
    cluster.replicas.delete(victim)

    def told() -> bool:
        return any(STOPPED in text for text in cluster.slack_texts(root))

    await until(told, ANSWER_S, f"the thread was not told that {victim} stopped", cluster)
    await cluster.slack.post(sl.C_GENERAL, "add one", thread_ts=root, mention_bot=True, user=user)
    await until(
        lambda: cluster.slack_done(root) >= 2, ANSWER_S, "no answer after the failover", cluster
    )
    return root, victim, time.monotonic() - deleted
