"""Settings turned into running services: storage, history, model client, executor, agent,
and what runs beside them (the HTTP server and scheduled pruning)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import timedelta

from aiohttp import web

from bot.agent import Agent, AgentLimits
from bot.agent.history import History
from bot.conversations import Conversations
from bot.conversations.background_store import BackgroundStore
from bot.conversations.network import NetworkGrants
from bot.conversations.policy import Policies
from bot.conversations.quotas import Quotas
from bot.conversations.schedule_store import ScheduleStore
from bot.conversations.schedules import Scheduler
from bot.conversations.session_owners import SessionOwners
from bot.conversations.shared_events import SharedEvents
from bot.conversations.turn_leases import LabelTaken, TurnLeases
from bot.database import Databases
from bot.metrics import Metrics
from bot.ops.egress_link import (
    cluster_proxy_ca,
    proxy_beside_the_engine,
    proxy_options,
    start_egress,
)
from bot.ops.http import Checks, create_app, start_server
from bot.ops.model_setup import build_model_client
from bot.ops.storage_setup import build_storage, link_secret
from bot.settings import Settings, SettingsError
from bot.workspaces import StoredWorkspaces
from executor import Executor, PoolSettings
from storage.artifacts import ArtifactLimits
from storage.base import Storage
from storage.errors import StorageError, StorageUnavailable
from storage.intake import Fetcher, IntakeLimits
from storage.local import LocalStorage
from storage.retention import prune_periodically
from storage.stable_links import StableLinks


@dataclass(frozen=True, slots=True)
class Services:
    agent: Agent
    storage: Storage
    settings: Settings
    conversations: Conversations
    metrics: Metrics
    connected: dict[str, bool] = field(default_factory=dict)
    """Platform name -> whether its connection is up, for /healthz."""


@contextlib.asynccontextmanager
async def services(
    settings: Settings, pool: PoolSettings | None = None, fetch: Fetcher | None = None
) -> AsyncIterator[Services]:
    """Everything a front end needs, checked (storage) and started (executor, pool)."""
    storage = build_storage(settings)
    try:
        await storage.check()
    except StorageError:
        await storage.close()
        raise
    where = databases(settings)
    try:
        history = History(where)
        quotas = Quotas(where, settings.quotas)
        policies = Policies(where, settings.policy)
        network = NetworkGrants(where, settings.network)
        schedules = ScheduleStore(where)
        kept_runs = BackgroundStore(where)
        # Replicas share a conversation's turns only through a shared database.
        leases = TurnLeases(where) if settings.database_url else None
        events = SharedEvents(where) if settings.database_url else None
        # ... and a conversation's live session, which moves to the replica its turn reaches.
        owners = SessionOwners(where, settings.sandbox_instance) if settings.database_url else None
    except BaseException:
        # A database that cannot be reached (or migrated) stops the start; the storage
        # client and a PostgreSQL pool are not left open behind it.
        where.close()
        await storage.close()
        raise
    metrics = Metrics()
    client = build_model_client(settings.model)
    limits, proxy_args = settings.sandbox, list[str]()
    if limits.egress == "allowlist" and settings.executor_backend == "kubernetes":
        # The proxy's own Deployment holds the secrets; the bot holds the CA's certificate.
        trusted_ca = cluster_proxy_ca(settings.kubernetes.egress_ca_file)
        limits = dataclasses.replace(limits, trusted_ca=trusted_ca)
        if settings.network.secrets_file:
            proxy_args = ["--secrets", settings.network.secrets_file]  # refused, saying why
    elif limits.egress == "allowlist":
        trusted_ca, proxy_args = proxy_options(settings.network, settings.data_dir)
        limits = dataclasses.replace(limits, trusted_ca=trusted_ca)
    try:
        async with (
            sandbox_label(leases, settings),
            Executor(
                settings.image,
                limits=limits,
                backend=settings.sandbox_backend(),
                instance=settings.sandbox_instance,
                pool=pool or settings.pool,
                workspaces=workspaces(settings, storage),
                workspace_settings=settings.workspace,
                owners=owners,
            ) as executor,
        ):
            agent = Agent(
                executor,
                storage,
                history,
                client=client,
                model=settings.model.model,
                limits=AgentLimits(
                    max_steps=settings.model.max_steps,
                    budget_s=settings.model.turn_budget_s,
                    vision=settings.model.vision,
                    history_tokens=settings.model.history_tokens,
                    stream=settings.model.stream,
                ),
                artifact_limits=ArtifactLimits(
                    max_bytes=int(settings.storage.artifact_max_mb * 1e6),
                    max_count=settings.storage.artifact_max_count,
                    link_expiry=timedelta(days=settings.storage.link_expiry_days),
                ),
                intake_limits=IntakeLimits(
                    max_bytes=int(settings.storage.attachment_max_mb * 1e6),
                    max_count=settings.storage.attachment_max_count,
                ),
                fetch=fetch,
                metrics=metrics,
            )
            metrics.watch(executor)
            conversations = Conversations(
                agent,
                admins=frozenset(settings.admins),
                quotas=quotas,
                policies=policies,
                network=network,
                input_timeout_s=settings.input_timeout_s,
                background_max_s=settings.background_run_max_s,
                background_per_person=settings.background_runs_per_person,
            )
            conversations.background.store = kept_runs
            conversations.leases = leases
            if leases is not None:
                metrics.watch_cluster(leases)
            conversations.shared_events = events
            scheduler = conversations.schedules = Scheduler(
                conversations, schedules, settings.schedule
            )
            link = None
            if settings.sandbox.egress == "allowlist":
                link = await start_egress(
                    executor,
                    conversations,
                    settings.sandbox.proxy_port,
                    ",".join(settings.network.private_allowed),
                    proxy_args,
                    metrics,
                    await proxy_beside_the_engine(settings.network),
                )
                agent.refusals = link.take_notes
            scheduler.start()
            try:
                yield Services(agent, storage, settings, conversations, metrics)
            finally:
                await conversations.background.close()
                await scheduler.close()
                if link is not None:
                    await link.close()
    finally:
        await storage.close()
        history.close()
        quotas.close()
        policies.close()
        network.close()
        schedules.close()
        kept_runs.close()
        if leases is not None:
            leases.close()
        if events is not None:
            events.close()
        if owners is not None:
            owners.close()
        where.close()
        if client is not None:
            await client.close()


@contextlib.asynccontextmanager
async def sandbox_label(leases: TurnLeases | None, settings: Settings) -> AsyncIterator[None]:
    """This process's sandbox label, held in the shared database while it runs (no other
    live replica may use it); without a shared database, nothing to hold."""
    if leases is None:
        yield
        return
    try:
        async with leases.label_held(settings.sandbox_instance, socket.gethostname()):
            yield
    except LabelTaken as exc:  # raised as the label is taken, before the block runs
        raise SettingsError(str(exc)) from None


def databases(settings: Settings) -> Databases:
    """Where the stores keep their tables: CELLMATE_DATABASE_URL, or SQLite files in
    CELLMATE_DATA_DIR."""
    return Databases(settings.database_url, settings.data_dir)


def workspaces(settings: Settings, storage: Storage) -> StoredWorkspaces | None:
    """Sessions' workspaces, sealed, in the artifact storage (unless turned off)."""
    if not settings.workspace.enabled:
        return None
    retention = timedelta(days=settings.workspace.retention_days)
    return StoredWorkspaces(
        storage,
        link_secret(settings),
        retention,
        settings.workspace.person_mb,
        settings.workspace.total_mb,
    )


@contextlib.asynccontextmanager
async def background(
    settings: Settings,
    storage: Storage,
    always_serve: bool = False,
    extend: Callable[[web.Application], None] | None = None,
    checks: Checks | None = None,
    metrics: Metrics | None = None,
) -> AsyncIterator[None]:
    """The HTTP server (local links, health, platform webhooks) and scheduled pruning.

    The console chat needs the server only for local links; `serve` always runs it.
    """
    runner = None
    links = storage if isinstance(storage, StableLinks) else None
    inner = links.inner if links is not None else storage
    local = inner if isinstance(inner, LocalStorage) and inner.base_url else None
    if always_serve or local is not None or links is not None:
        app = create_app(local, checks, metrics.exposition if metrics else None, links)
        if extend is not None:
            extend(app)
        address = f"{settings.http_host}:{settings.http_port}"
        try:
            runner = await start_server(app, settings.http_host, settings.http_port)
        except OSError as exc:
            raise StorageUnavailable(
                f"cannot serve HTTP on {address}: {exc.strerror or exc}; "
                "set CELLMATE_HTTP_PORT (or CELLMATE_HTTP_HOST) to a free address"
            ) from exc
    pruning = None
    if settings.storage.retention_days:
        pruning = asyncio.create_task(prune_periodically(storage, settings.storage.retention_days))
    try:
        yield
    finally:
        if pruning is not None:
            pruning.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pruning
        if runner is not None:
            await runner.cleanup()
