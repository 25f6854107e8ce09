"""Settings from the environment and `.env`; the only module that reads either.

Sandbox limits are `CELLMATE_SANDBOX_<FIELD>` for every field of `SandboxLimits`
(e.g. `CELLMATE_SANDBOX_MEMORY_MB=2048`, `CELLMATE_SANDBOX_RUNTIME=runsc`), except the
network's (`CELLMATE_NETWORK=off|allowlist`, `CELLMATE_PIP_INDEX_URL`,
`CELLMATE_NETWORK_PROXY_PORT`); the pool and
sessions are `CELLMATE_POOL_<FIELD>` for every field of `PoolSettings`; artifacts are
`CELLMATE_STORAGE_<FIELD>`, and Azure Blob uses the `AZURE_*` names operators already know.

Longer than most modules because it holds every section's settings; each section is
small and the only reader of the environment stays in one place.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import socket
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from dotenv import dotenv_values

from bot.conversations.network import NetworkSettings
from bot.conversations.policy import PolicySettings
from bot.conversations.quotas import QuotaSettings
from bot.conversations.schedules import ScheduleSettings
from bot.database import url_problem
from executor.backends import build_backend
from executor.executor import PoolSettings
from executor.image import default_tag
from executor.kubernetes_backend import KubernetesSettings
from executor.limits import SandboxLimits
from executor.protocol import SandboxBackend
from executor.workspace import WorkspaceSettings
from storage.intake import file_hosts

SANDBOX_PREFIX = "CELLMATE_SANDBOX_"
POOL_PREFIX = "CELLMATE_POOL_"
STORAGE_PREFIX = "CELLMATE_STORAGE_"
SESSION_NAMES = {
    "pause_after_s": "CELLMATE_SESSION_PAUSE_AFTER_S",
    "pause_max_mb": "CELLMATE_SESSION_PAUSE_MAX_MB",
}
"""Pool settings named for what they do to sessions."""
DISCORD_PREFIX = "CELLMATE_DISCORD_"
SLACK_PREFIX = "CELLMATE_SLACK_"
QUOTA_PREFIX = "CELLMATE_QUOTA_"
POLICY_PREFIX = "CELLMATE_POLICY_"
KUBERNETES_PREFIX = "CELLMATE_KUBERNETES_"
WORKSPACE_PREFIX = "CELLMATE_WORKSPACE_"
NETWORK_PREFIX = "CELLMATE_NETWORK_"
SCHEDULE_NAMES = {
    "timezone": "CELLMATE_SCHEDULE_TIMEZONE",
    "per_person": "CELLMATE_SCHEDULES_PER_PERSON",
    "min_interval_s": "CELLMATE_SCHEDULE_MIN_INTERVAL_S",
    "at_once": "CELLMATE_SCHEDULE_RUNS_AT_ONCE",
    "late_after_s": "CELLMATE_SCHEDULE_LATE_AFTER_S",
}
MODEL_NAMES = {
    "api_key": "OPENAI_API_KEY",
    "base_url": "OPENAI_BASE_URL",
    "model": "OPENAI_MODEL",
    "azure_endpoint": "AZURE_OPENAI_ENDPOINT",
    "azure_api_key": "AZURE_OPENAI_API_KEY",
    "api_version": "OPENAI_API_VERSION",
    "timeout_s": "CELLMATE_LLM_TIMEOUT_S",
    "max_retries": "CELLMATE_LLM_MAX_RETRIES",
    "max_steps": "CELLMATE_AGENT_MAX_STEPS",
    "turn_budget_s": "CELLMATE_AGENT_TURN_BUDGET_S",
    "vision": "CELLMATE_LLM_VISION",
    "stream": "CELLMATE_LLM_STREAM",
    "history_tokens": "CELLMATE_HISTORY_TOKENS",
}
AZURE_NAMES = {
    "connection_string": "AZURE_STORAGE_CONNECTION_STRING",
    "container": "AZURE_BLOB_CONTAINER_NAME",
    "account_name": "AZURE_STORAGE_ACCOUNT_NAME",
    "account_key": "AZURE_STORAGE_ACCOUNT_KEY",
}
DISCORD_NAMES = {"token": "DISCORD_TOKEN", "api_url": "DISCORD_API_URL"}
SLACK_NAMES = {
    "bot_token": "SLACK_BOT_TOKEN",
    "app_token": "SLACK_APP_TOKEN",
    "signing_secret": "SLACK_SIGNING_SECRET",
    "api_url": "SLACK_API_URL",
}
NETWORK_NAMES = {
    "egress": "CELLMATE_NETWORK",
    "pip_index_url": "CELLMATE_PIP_INDEX_URL",
    "proxy_port": "CELLMATE_NETWORK_PROXY_PORT",
}
"""The sandbox network's settings, named for the deployment rather than the sandbox."""
T = TypeVar("T")
TRUE = {"1", "true", "yes", "on"}
FALSE = {"0", "false", "no", "off", ""}


class SettingsError(ValueError):
    """A setting has a value that cannot be used; the message names it."""


@dataclass(frozen=True, slots=True)
class StorageSettings:
    """Where artifacts go: Azure Blob when it is configured, local files otherwise."""

    backend: typing.Literal["auto", "local", "azure"] = "auto"
    public_base_url: str = ""
    """Base of artifact links: the bot's own address for local files (e.g.
    https://bot.example.com), or a CDN / custom domain in front of the Blob container."""
    link_expiry_days: float = 7.0
    retention_days: int = 0
    """Remove artifacts older than this many days (0: keep them)."""
    artifact_max_mb: float = 25.0
    artifact_max_count: int = 50
    attachment_max_mb: float = 25.0
    attachment_max_count: int = 10
    link_secret: str = ""
    """Signs local links; by default a random secret kept in the data directory."""
    bot_url: str = ""
    """The bot's own public address (https://bot.example.com). When set (or when local files
    are served from public_base_url), chat messages carry stable links `/a/<id>` on it that
    redirect to a freshly signed link on each click and work until retention removes the
    file."""

    def __post_init__(self) -> None:
        if self.link_expiry_days <= 0 or self.retention_days < 0:
            raise ValueError("link_expiry_days must be positive and retention_days not negative")
        for name in ("public_base_url", "bot_url"):
            value = getattr(self, name)
            if value and not value.startswith(("http://", "https://")):
                raise ValueError(f"{name} must start with http:// or https://")


@dataclass(frozen=True, slots=True)
class AzureSettings:
    connection_string: str = ""
    container: str = "cellmate"
    account_name: str = ""
    account_key: str = ""

    @property
    def configured(self) -> bool:
        return bool(self.connection_string or self.account_name)


@dataclass(frozen=True, slots=True)
class ModelSettings:
    """The model endpoint: OpenAI, Azure OpenAI, or any OpenAI-compatible server."""

    api_key: str = ""
    base_url: str = ""
    model: str = "gpt-4o-mini"
    azure_endpoint: str = ""
    azure_api_key: str = ""
    api_version: str = "2024-10-21"
    timeout_s: float = 60.0
    max_retries: int = 2
    max_steps: int = 8
    turn_budget_s: float = 300.0
    vision: bool = False
    stream: bool = True
    """Stream replies, so that chats show the answer as it is written; turn off for servers
    that cannot stream together with tool calls."""
    history_tokens: int = 16_000
    """Tokens of earlier messages sent with each request; older turns become a summary."""

    def __post_init__(self) -> None:
        if self.history_tokens < 1_000:
            raise ValueError("history_tokens must be at least 1000")

    @property
    def configured(self) -> bool:
        return bool(self.api_key or self.base_url or self.azure_endpoint)


@dataclass(frozen=True, slots=True)
class DiscordSettings:
    """The Discord front end: `DISCORD_TOKEN`, and `CELLMATE_DISCORD_<FIELD>` for the rest."""

    token: str = ""
    api_url: str = ""
    """Discord's REST base URL (for a proxy or a test server); Discord's own by default."""
    test_guild: str = ""
    """Sync commands to this server only (instant), instead of globally."""
    message_content: bool = False
    """Use the privileged message-content intent: follow-ups in a thread need no mention."""
    guilds: tuple[str, ...] = ()
    channels: tuple[str, ...] = ()
    roles: tuple[str, ...] = ()
    users: tuple[str, ...] = ()
    dms: bool = True
    dm_users: tuple[str, ...] = ()
    """Admitted by DM without being a member of an allowed server with an allowed role."""
    membership_ttl_s: float = 60.0
    """How long a DM sender's looked-up server membership and roles are trusted."""
    cooldown_s: float = 2.0
    upload_limit_mb: float = 10.0
    """Discord's attachment limit for the bot (10 MB on servers without boosts)."""
    file_hosts: tuple[str, ...] = ()
    """Hosts (or http(s) origins) attachments are downloaded from; Discord's CDN, plus the
    `api_url` server when one is set, by default."""
    files_per_answer: int = 10
    """Charts and files shown with one answer; the rest are counted in a note."""
    user_install: bool = False
    """Offer /run and Run with Cellmate to people who install the app to their account, in
    DMs, group DMs and servers the bot is not in (off: nobody outside the bot's servers)."""
    user_install_users: tuple[str, ...] = ()
    """Only these people through a user install (empty: whoever a DM to the bot admits)."""
    shard_count: int = 0
    """Shards the bot's gateway is split into, one per replica (0: one connection, no
    sharding). Discord sends each server's events to shard (server id >> 22) % count, and
    DMs to shard 0."""
    shard_id: str = "auto"
    """This replica's shard, or `auto`: the ordinal at the end of the host's name, as a
    StatefulSet names its Pods (`cellmate-bot-2` is shard 2)."""

    def __post_init__(self) -> None:
        _check_chat_files(self.file_hosts, self.files_per_answer)
        if self.shard_count < 0:
            raise ValueError("CELLMATE_DISCORD_SHARD_COUNT must not be negative")
        if self.shard_id != "auto" and not self.shard_id.isdigit():
            raise ValueError("CELLMATE_DISCORD_SHARD_ID must be a shard number or auto")

    @property
    def configured(self) -> bool:
        return bool(self.token)

    def shard(self, hostname: str | None = None) -> int | None:
        """This replica's shard (None: not sharded). Raises ValueError when `auto` finds
        no ordinal, or the shard is not below the count."""
        if not self.shard_count:
            return None
        if self.shard_id != "auto":
            found = int(self.shard_id)
        else:
            name = hostname if hostname is not None else socket.gethostname()
            ordinal = statefulset_ordinal(name)
            if ordinal is None:
                raise ValueError(
                    f"CELLMATE_DISCORD_SHARD_ID is auto, but the host name {name!r} ends in no "
                    "ordinal (-N): set the shard number"
                )
            found = ordinal
        if found >= self.shard_count:
            raise ValueError(
                f"this replica's shard is {found}, but CELLMATE_DISCORD_SHARD_COUNT is "
                f"{self.shard_count}: every shard must be below the count"
            )
        return found


def statefulset_ordinal(hostname: str | None = None) -> int | None:
    """The ordinal at the end of the host's name (`cellmate-2` is 2), as a StatefulSet names
    its Pods; None for any other name."""
    name = hostname if hostname is not None else socket.gethostname()
    ordinal = re.search(r"-([0-9]+)$", name)
    return None if ordinal is None else int(ordinal.group(1))


def _check_chat_files(hosts: tuple[str, ...], per_answer: int) -> None:
    file_hosts(hosts)  # raises ValueError naming a bad entry
    if per_answer < 0:
        raise ValueError("files_per_answer must not be negative")


ASSISTANT_GREETING = (
    "Hi! Ask me anything Python can answer: I write the code, run it in a sandbox and show "
    "the result. Share a CSV or Excel file to analyse it."
)
ASSISTANT_PROMPTS = (
    "Plot a function :: Plot sin(x) and cos(x) from 0 to 2π on one chart."
    " | Simulate dice :: Roll two dice 10,000 times and show how often each sum comes up."
    " | Compound interest :: What do 1,000 € grow to in 10 years at 3 % a year, compounded"
    " monthly?"
    " | Analyse a file :: Summarise the file I attach: its columns, their types and a chart of"
    " the most interesting one."
)
MAX_PROMPTS = 4
"""Slack shows at most four suggested prompts."""
PROMPT_TITLE_MAX = 75


@dataclass(frozen=True, slots=True)
class SlackSettings:
    """The Slack front end: `SLACK_*` tokens, and `CELLMATE_SLACK_<FIELD>` for the rest."""

    bot_token: str = ""
    app_token: str = ""
    """An app-level token (xapp-...) selects Socket Mode."""
    signing_secret: str = ""
    """Verifies requests in HTTP mode (events at /slack/events on the HTTP server)."""
    api_url: str = ""
    """Slack's Web API base URL (for a proxy or a test server); Slack's own by default."""
    mode: typing.Literal["auto", "socket", "http"] = "auto"
    teams: tuple[str, ...] = ()
    channels: tuple[str, ...] = ()
    users: tuple[str, ...] = ()
    dms: bool = True
    dm_users: tuple[str, ...] = ()
    """Admitted by DM without being a member of an allowed channel."""
    membership_ttl_s: float = 60.0
    """How long the looked-up members of an allowed channel are trusted."""
    cooldown_s: float = 2.0
    thread_replies: bool = True
    """Replies in a thread the bot is part of continue the conversation without a mention."""
    file_hosts: tuple[str, ...] = ()
    """Hosts (or http(s) origins) that get the bot token when a shared file is downloaded;
    files.slack.com, plus the `api_url` server when one is set, by default."""
    files_per_answer: int = 10
    """Charts and files shown with one answer; the rest are counted in a note."""
    stream: bool = True
    """The model's words are streamed (chat.startStream/appendStream/stopStream) where the
    workspace allows it; off, or where it does not, the progress message is edited."""
    assistant_greeting: str = ASSISTANT_GREETING
    """What the bot says when someone opens a new assistant thread ("off": nothing)."""
    assistant_prompts: str = ASSISTANT_PROMPTS
    """The suggested prompts of a new assistant thread, `|`-separated, each `title :: message`
    or just the message (at most four; "off": none)."""

    def __post_init__(self) -> None:
        _check_chat_files(self.file_hosts, self.files_per_answer)
        self.suggested_prompts()  # fails early on a bad list

    def greeting(self) -> str:
        """The greeting of a new assistant thread ('' for none)."""
        text = self.assistant_greeting.strip()
        return "" if text.lower() == "off" else text

    def suggested_prompts(self) -> list[tuple[str, str]]:
        """The suggested prompts of a new assistant thread, as (title, message)."""
        if self.assistant_prompts.strip().lower() in ("", "off"):
            return []
        prompts: list[tuple[str, str]] = []
        for item in self.assistant_prompts.split("|"):
            title, _, message = item.partition("::")
            title, message = title.strip(), message.strip()
            if not message:
                title, message = title[:PROMPT_TITLE_MAX], title
            if message:
                prompts.append((title[:PROMPT_TITLE_MAX], message))
        if len(prompts) > MAX_PROMPTS:
            raise ValueError(f"at most {MAX_PROMPTS} suggested prompts, got {len(prompts)}")
        return prompts

    @property
    def connection(self) -> typing.Literal["socket", "http"]:
        if self.mode == "auto":
            return "socket" if self.app_token else "http"
        return self.mode

    @property
    def configured(self) -> bool:
        return bool(self.bot_token)

    def problem(self) -> str | None:
        """What is missing for the chosen connection mode, if anything."""
        if self.connection == "socket" and not self.app_token:
            return "Socket Mode needs SLACK_APP_TOKEN (an app-level token, xapp-...)"
        if self.connection == "http" and not self.signing_secret:
            return "HTTP mode needs SLACK_SIGNING_SECRET (or SLACK_APP_TOKEN for Socket Mode)"
        return None


@dataclass(frozen=True, slots=True)
class Settings:
    sandbox: SandboxLimits = field(default_factory=SandboxLimits)
    pool: PoolSettings = field(default_factory=PoolSettings)
    executor_backend: typing.Literal["docker", "kubernetes"] = "docker"
    """Where sandboxes run: containers on the Docker engine, or Pods on a cluster."""
    kubernetes: KubernetesSettings = field(default_factory=KubernetesSettings)
    kubernetes_allow_runc: bool = False
    """CELLMATE_KUBERNETES_ALLOW_RUNC: run sandbox Pods under runc at all. They share the
    node's kernel, and reach other Pods unless a network plugin enforces NetworkPolicy."""
    storage: StorageSettings = field(default_factory=StorageSettings)
    workspace: WorkspaceSettings = field(default_factory=WorkspaceSettings)
    azure: AzureSettings = field(default_factory=AzureSettings)
    http_port: int = 8080
    http_host: str = "127.0.0.1"
    """Where the HTTP server listens; 0.0.0.0 to serve local links to other machines."""
    mcp: bool = False
    """CELLMATE_MCP: serve the MCP endpoint (coding agents run code in a conversation with a
    person's `/mcp token`)."""
    mcp_host: str = "127.0.0.1"
    mcp_port: int = 8765
    """Where the MCP endpoint (streamable HTTP, path /mcp) listens."""
    model: ModelSettings = field(default_factory=ModelSettings)
    discord: DiscordSettings = field(default_factory=DiscordSettings)
    slack: SlackSettings = field(default_factory=SlackSettings)
    quotas: QuotaSettings = field(default_factory=QuotaSettings)
    policy: PolicySettings = field(default_factory=PolicySettings)
    """Approval of the model's code: the default policy, who approves, how long it waits."""
    network: NetworkSettings = field(default_factory=NetworkSettings)
    """CELLMATE_NETWORK (off or allowlist) and the operator's hosts: what sandboxes reach."""
    background_run_max_s: float = 3600.0
    """CELLMATE_BACKGROUND_RUN_MAX_S: how long a run may take in all once it goes on in the
    background (it reached its time limit, Keep running, `/run --background`); 0: runs end
    at their time limit."""
    background_runs_per_person: int = 2
    """CELLMATE_BACKGROUND_RUNS_PER_PERSON: background runs one person may have at once."""
    schedule: ScheduleSettings = field(default_factory=ScheduleSettings)
    """/schedule: the zone of times that name none, and the limits on schedules."""
    admins: tuple[str, ...] = ()
    """User ids (Discord or Slack) who may see /usage."""
    shutdown_grace_s: float = 30.0
    """On SIGTERM, how long running turns may take to finish before they are stopped."""
    session_secret: str = field(default="", repr=False)
    """CELLMATE_SESSION_SECRET: with it, a restart of the bot keeps live sessions (their
    kernels, mid-run too) on Docker as on Kubernetes: the next process derives each
    sandbox's runner key again and attaches to it."""
    input_timeout_s: float = 120.0
    """How long the code's `input()` or `getpass()` waits for the person's answer in the
    chat (less when the turn's time budget would run out first); then it raises EOFError."""
    log_format: typing.Literal["text", "json"] = "text"
    log_level: typing.Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    sandbox_image: str = ""
    """Image for sandboxes; by default the content-hash tag of environments/jupyter."""
    instance: str = "default"
    """Label of this bot's sandboxes, so that start-up clean-up spares other instances."""
    data_dir: Path = Path(".data")
    database_url: str = field(default="", repr=False)
    """CELLMATE_DATABASE_URL: where the bot keeps history, quotas, policies, schedules,
    background runs and MCP tokens. Empty: SQLite files in CELLMATE_DATA_DIR (one process);
    postgresql://user:pass@host:port/db: one PostgreSQL database that replicas share."""
    debian_mirror: str = "http://deb.debian.org/debian"

    def __post_init__(self) -> None:
        if problem := url_problem(self.database_url):
            raise ValueError(problem)

    @property
    def image(self) -> str:
        return self.sandbox_image or default_tag(languages=self.sandbox.image_languages)

    @property
    def sandbox_instance(self) -> str:
        """The label of this process's sandboxes: CELLMATE_INSTANCE, and with Discord's
        gateway sharded, the replica's shard too. A process removes the sandboxes of its
        label that it finds at start and re-attaches to them with the session secret, so
        replicas must not share one: each keeps its own, and a restarted replica (the same
        shard) finds its own again. Replicas without Discord shards (sharing a database) take
        the ordinal at the end of the host's name, as a StatefulSet names its Pods."""
        shard = self.discord.shard() if self.discord.configured else None
        if shard is not None:
            return f"{self.instance}-shard{shard}"
        replica = statefulset_ordinal() if self.database_url else None
        return self.instance if replica is None else f"{self.instance}-replica{replica}"

    def sandbox_backend(self) -> SandboxBackend | None:
        """The chosen executor backend; None for the executor's default (Docker without a
        session secret)."""
        if self.executor_backend == "docker" and not self.session_secret:
            return None
        if refusal := self.runc_refusal():
            raise SettingsError(refusal)
        kubernetes = self.kubernetes
        if not kubernetes.session_secret and self.session_secret:
            kubernetes = dataclasses.replace(kubernetes, session_secret=self.session_secret)
        return build_backend(
            self.executor_backend,
            self.image,
            instance=self.sandbox_instance,
            kubernetes=kubernetes,
            session_secret=self.session_secret,
        )

    def runc_refusal(self) -> str | None:
        """Why sandboxes may not run as chosen: runc on Kubernetes needs an explicit yes."""
        if self.executor_backend != "kubernetes" or self.sandbox.runtime != "runc":
            return None
        if self.kubernetes_allow_runc:
            return None
        return (
            "CELLMATE_SANDBOX_RUNTIME=runc on Kubernetes needs CELLMATE_KUBERNETES_ALLOW_RUNC=1: "
            "runc sandboxes share the node's kernel and, unless the cluster's network plugin "
            "enforces NetworkPolicy, reach other conversations' sandbox Pods. Use "
            "CELLMATE_SANDBOX_RUNTIME=runsc (gVisor), or set CELLMATE_KUBERNETES_ALLOW_RUNC=1 "
            "to accept that"
        )

    @property
    def secrets(self) -> list[str]:
        """Values that must never appear in logs."""
        values = [
            self.discord.token,
            self.slack.bot_token,
            self.slack.app_token,
            self.slack.signing_secret,
            self.model.api_key,
            self.model.azure_api_key,
            self.azure.account_key,
            self.azure.connection_string,
            self.storage.link_secret,
            self.kubernetes.session_secret,
            self.session_secret,
            self.network.control_token,
        ]
        # A database URL's password also appears on its own.
        with contextlib.suppress(ValueError):
            values.append(urlsplit(self.database_url).password or "")
        values.append(self.database_url)
        # A connection string's account key also appears on its own.
        for part in self.azure.connection_string.split(";"):
            if part.startswith("AccountKey="):
                values.append(part.removeprefix("AccountKey="))
        return [value for value in values if value]


def load_settings(
    environ: Mapping[str, str] | None = None, env_file: Path | None = Path(".env")
) -> Settings:
    """Settings from `environ` (the process environment by default) over the `.env` file."""
    values: dict[str, str] = {}
    if env_file is not None and env_file.is_file():
        values.update({k: v for k, v in dotenv_values(env_file).items() if v is not None})
    values.update(os.environ if environ is None else environ)
    if values.get("CELLMATE_LOG_LEVEL"):
        values["CELLMATE_LOG_LEVEL"] = values["CELLMATE_LOG_LEVEL"].upper()
    return _section(
        Settings,
        "CELLMATE_",
        values,
        sections={
            "sandbox": _section(SandboxLimits, SANDBOX_PREFIX, values, named=NETWORK_NAMES),
            "pool": _section(PoolSettings, POOL_PREFIX, values, named=SESSION_NAMES),
            "kubernetes": _section(KubernetesSettings, KUBERNETES_PREFIX, values),
            "storage": _section(StorageSettings, STORAGE_PREFIX, values),
            "workspace": _section(WorkspaceSettings, WORKSPACE_PREFIX, values),
            "azure": _section(AzureSettings, "", values, named=AZURE_NAMES),
            "model": _section(ModelSettings, "", values, named=MODEL_NAMES),
            "discord": _section(DiscordSettings, DISCORD_PREFIX, values, named=DISCORD_NAMES),
            "slack": _section(SlackSettings, SLACK_PREFIX, values, named=SLACK_NAMES),
            "quotas": _section(QuotaSettings, QUOTA_PREFIX, values),
            "policy": _section(PolicySettings, POLICY_PREFIX, values),
            "schedule": _section(ScheduleSettings, "", values, named=SCHEDULE_NAMES),
            "network": _section(
                NetworkSettings, NETWORK_PREFIX, values, named={"mode": "CELLMATE_NETWORK"}
            ),
        },
    )


def _section(
    kind: type[T],
    prefix: str,
    values: Mapping[str, str],
    named: Mapping[str, str] | None = None,
    sections: Mapping[str, Any] | None = None,
) -> T:
    """A settings dataclass from `<prefix><FIELD>` variables (or the names in `named`), with
    its nested `sections` already built. An empty variable means the field's default, as
    when it is not set at all: `.env.example` lists every name with an empty value."""
    hints = typing.get_type_hints(kind)
    given: dict[str, Any] = dict(sections or {})
    for item in dataclasses.fields(kind):  # type: ignore[arg-type]
        if item.name in given or not item.init or item.metadata.get("derived"):
            continue  # fields derived from the others, or by the bot
        name = (named or {}).get(item.name) or prefix + item.name.upper()
        raw = values.get(name, "").strip()
        if raw:
            given[item.name] = _parse(name, raw, hints[item.name])
    try:
        return kind(**given)
    except ValueError as exc:
        which = f"{prefix}*" if prefix else ", ".join(sorted((named or {}).values()))
        raise SettingsError(f"{exc} (check the {which} settings)") from exc


def _parse(name: str, raw: str, kind: Any) -> Any:
    if kind is bool:
        if raw.lower() in TRUE:
            return True
        if raw.lower() in FALSE:
            return False
        raise SettingsError(f"{name} must be true or false, got {raw!r}")
    if kind is int:
        try:
            return int(raw)
        except ValueError:
            raise SettingsError(f"{name} must be a whole number, got {raw!r}") from None
    if kind is float:
        try:
            return float(raw)
        except ValueError:
            raise SettingsError(f"{name} must be a number, got {raw!r}") from None
    if kind is Path:
        return Path(raw)
    if kind == tuple[str, ...]:
        return tuple(part.strip() for part in raw.split(",") if part.strip())
    allowed = typing.get_args(kind)
    if allowed and raw not in allowed:
        raise SettingsError(f"{name} must be one of {', '.join(allowed)}, got {raw!r}")
    return raw
