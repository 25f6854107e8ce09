"""`cellmate doctor`: checks everything the bot needs, says what is wrong and how to fix it.

Each check is independent and bounded in time; the command exits non-zero when a required
part fails (the engine, the image, the runtime, storage, the database, and every configured
platform or model). Nothing secret is printed."""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TextIO

import docker

from bot.agent.tokens import Counter
from bot.ops.cluster_enforcement import enforcement
from bot.ops.cluster_isolation import isolation
from bot.ops.database_check import database_check
from bot.ops.findings import Finding
from bot.ops.front_ends import PLATFORMS
from bot.ops.mcp_check import mcp_check
from bot.ops.model_setup import build_model_client
from bot.ops.storage_setup import build_storage
from bot.settings import Settings
from executor import EngineUnavailable, ExecutorError
from executor.backends import build_backend
from executor.docker_backend import RuntimeMissing, check_runtime, connect
from executor.docker_snapshots import pause_refusal
from executor.egress import engine_runtime
from executor.kubernetes_backend import KubernetesBackend

TIMEOUT_S = 15.0


Check = Callable[[Settings], Awaitable[list[Finding]]]


async def diagnose(settings: Settings) -> list[Finding]:
    findings: list[Finding] = [Finding("settings", True, "loaded (.env and the environment)")]
    checks: list[tuple[str, Check]] = [("sandboxes", _sandboxes), ("storage", _storage)]
    checks += [("database", database_check)]
    checks += [("model", _model), *((p.key, p.check) for p in PLATFORMS), ("mcp", mcp_check)]
    for name, check in checks:
        try:
            findings += await asyncio.wait_for(check(settings), TIMEOUT_S)
        except TimeoutError:
            findings.append(Finding(name, False, f"no answer within {TIMEOUT_S:g} s"))
    return findings


def report(findings: list[Finding], out: TextIO) -> int:
    width = max(len(f.name) for f in findings)
    for finding in findings:
        mark = "✓" if finding.ok else ("✗" if finding.required else "!")
        out.write(f"{mark} {finding.name:<{width}}  {finding.detail}\n")
        if finding.fix and not finding.ok:
            out.write(f"  {'':<{width}}  → {finding.fix}\n")
    failed = [f for f in findings if f.required and not f.ok]
    out.write("All required checks passed.\n" if not failed else f"{len(failed)} problem(s).\n")
    return 1 if failed else 0


async def _sandboxes(settings: Settings) -> list[Finding]:
    if settings.executor_backend == "kubernetes":
        return await _kubernetes(settings)
    return await _docker(settings)


async def _kubernetes(settings: Settings) -> list[Finding]:
    """The cluster answers and lets the bot do what sandboxes need (access reviews); runc
    is allowed if chosen; the namespace enforces the `restricted` level, and what else the
    cluster enforces there (bot/ops/cluster_enforcement.py); a sandbox Pod starts and gets
    ready, which proves the image, the RuntimeClass and the admission policy together; and
    a second one cannot reach it (bot/ops/cluster_isolation.py)."""
    backend = build_backend(
        "kubernetes",
        settings.image,
        instance=settings.instance,
        kubernetes=settings.kubernetes,
    )
    namespace = settings.kubernetes.namespace
    try:
        try:
            await backend.check(settings.sandbox.runtime)
        except ExecutorError as exc:
            return [
                Finding(
                    "cluster",
                    False,
                    str(exc),
                    "apply deploy/kubernetes/ and check CELLMATE_KUBERNETES_*",
                )
            ]
        found = [Finding("cluster", True, f"reachable; may run sandboxes in {namespace}")]
        refusal = settings.runc_refusal()
        if refusal:
            found.append(Finding("runtime", False, refusal))
        found.append(await _restricted(backend, namespace))
        try:
            found += await enforcement(backend, settings)
        except ExecutorError as exc:
            found.append(Finding("enforcement", False, f"could not be checked: {exc}"))
        found.append(
            Finding(
                "snapshots",
                False,
                "Kubernetes offers no checkpoints here: idle sessions keep their workspace only "
                "(files and pickled variables)",
                required=False,
            )
        )
        found.append(
            Finding("restarts", True, "sessions carry on when the bot restarts")
            if backend.keeps_sessions
            else Finding(
                "restarts",
                False,
                "sessions end when the bot restarts",
                "set CELLMATE_KUBERNETES_SESSION_SECRET (a long random value kept in a Secret)",
                required=False,
            )
        )
        try:
            sandbox = await backend.start(settings.sandbox, None)
            try:
                ready = await asyncio.wait_for(sandbox.receive(), TIMEOUT_S / 2)
                ok = ready is not None and ready.get("type") == "ready"
                detail = f"{settings.image} started under {settings.sandbox.runtime}"
                found.append(Finding("sandbox", ok, detail if ok else "started, but never ready"))
                if ok:
                    found.append(await isolation(backend, settings.sandbox, sandbox))
            finally:
                await sandbox.destroy()
        except (ExecutorError, TimeoutError) as exc:
            found.append(
                Finding(
                    "sandbox",
                    False,
                    f"a sandbox Pod did not start: {exc or 'no answer'}",
                    "load or push the image where the nodes pull from; check the RuntimeClass "
                    "(CELLMATE_KUBERNETES_RUNTIME_CLASS_*)",
                )
            )
        return found
    finally:
        await backend.close()


async def _restricted(backend: KubernetesBackend, namespace: str) -> Finding:
    try:
        level = await backend.namespace_label("pod-security.kubernetes.io/enforce")
    except ExecutorError as exc:
        return Finding("policy", False, f"cannot read the namespace: {exc}", required=False)
    if level == "restricted":
        return Finding("policy", True, f"{namespace} enforces PodSecurity 'restricted'")
    return Finding(
        "policy",
        False,
        f"{namespace} enforces {level or 'no PodSecurity level'}",
        "label it pod-security.kubernetes.io/enforce=restricted (deploy/kubernetes/ does)",
        required=False,
    )


async def _docker(settings: Settings) -> list[Finding]:
    try:
        client = await asyncio.to_thread(connect, 10)
    except EngineUnavailable as exc:
        return [
            Finding(
                "engine",
                False,
                str(exc).split(". Start Docker")[0],
                "start Docker, or run `make engine` (scripts/ensure-docker.sh installs and "
                "starts one)",
            )
        ]
    try:
        info = await asyncio.to_thread(client.info)
        found = [Finding("engine", True, f"Docker {info.get('ServerVersion', '?')} answers")]
        try:
            await asyncio.to_thread(client.images.get, settings.image)
            found.append(Finding("image", True, f"{settings.image} is present"))
        except docker.errors.ImageNotFound:
            found.append(
                Finding(
                    "image",
                    False,
                    f"{settings.image} is not built",
                    "run `cellmate build-image` (or `make build-image`)",
                )
            )
        runtime = settings.sandbox.runtime
        try:
            check_runtime(info, runtime)
            found.append(Finding("runtime", True, f"{runtime} is registered"))
        except RuntimeMissing as exc:
            runtimes = ", ".join(sorted(exc.registered))
            found.append(
                Finding(
                    "runtime",
                    False,
                    f"{runtime} is not registered (the engine has {runtimes})",
                    "install gVisor and register runsc (scripts/ensure-docker.sh does), or set "
                    "CELLMATE_SANDBOX_RUNTIME=runc",
                )
            )
        found.append(snapshots_finding(settings, info))
        if settings.sandbox.egress == "allowlist":
            found += await _doors(settings, info)
        return found
    finally:
        client.close()


def snapshots_finding(settings: Settings, info: Mapping[str, Any]) -> Finding:
    """Whether the engine can checkpoint gVisor sandboxes, and so whether idle sessions
    pause to memory snapshots (else they keep their workspace: files and pickles)."""
    pool = settings.pool
    refusal = pause_refusal(info, settings.sandbox)
    if refusal is None and "runsc" in (info.get("Runtimes") or {}):
        if not pool.pause_after_s:
            detail = "the engine can checkpoint; pausing is off (CELLMATE_SESSION_PAUSE_AFTER_S=0)"
        else:
            detail = (
                f"the engine can checkpoint: a session idle {pool.pause_after_s:g} s is paused "
                "to a memory snapshot"
                + (", and cold sandboxes are clones of a warmed template" if pool.template else "")
            )
        return Finding("snapshots", True, detail, required=False)
    return Finding(
        "snapshots",
        False,
        f"idle sessions keep their workspace only (files and pickled variables): {refusal}",
        "run sandboxes under gVisor (CELLMATE_SANDBOX_RUNTIME=runsc) on an engine with "
        '"experimental": true (scripts/ensure-docker.sh sets it)',
        required=False,
    )


async def _doors(settings: Settings, info: dict[str, Any]) -> list[Finding]:
    """What `CELLMATE_NETWORK=allowlist` needs on this host: the networked gVisor runtime
    (under runsc), mitmproxy where the bot runs the proxy, and the host rules that keep the
    sandbox bridges to the proxy's port."""
    found: list[Finding] = []
    runtime = engine_runtime(settings.sandbox.runtime, "allowlist")
    if runtime != settings.sandbox.runtime:
        try:
            check_runtime(info, runtime)
            found.append(Finding("network", True, f"{runtime} is registered for allowlist mode"))
        except RuntimeMissing:
            found.append(
                Finding(
                    "network",
                    False,
                    f"{runtime} (gVisor with a network, for allowlist mode) is not registered",
                    "run scripts/ensure-docker.sh with CELLMATE_NETWORK=allowlist",
                )
            )
    if importlib.util.find_spec("mitmproxy") is None:
        found.append(
            Finding(
                "proxy",
                False,
                "mitmproxy is not installed: the egress proxy cannot start",
                "pip install 'cellmate[egress]' (mitmproxy 11.0.2)",
            )
        )
    else:
        found.append(Finding("proxy", True, "mitmproxy is installed; the bot starts the proxy"))
    port = settings.sandbox.proxy_port
    guarded = await asyncio.to_thread(_host_rules_in_place)
    found.append(
        Finding("host rules", True, f"sandbox bridges reach only port {port} of this host")
        if guarded
        else Finding(
            "host rules",
            False,
            "no host rules keep the sandbox bridges to the proxy's port (or they cannot be "
            "read: run as root)",
            f"run scripts/guard-sandbox-network.sh add {port} as root",
        )
    )
    return found


def _host_rules_in_place() -> bool:
    try:
        done = subprocess.run(
            ["iptables", "-w", "-C", "INPUT", "-i", "cellmate-+", "-j", "CM-cellmate-ALL"],
            capture_output=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


async def _storage(settings: Settings) -> list[Finding]:
    storage = build_storage(settings)
    try:
        await storage.check()
    except Exception as exc:  # every failure is a finding, whatever its type
        return [
            Finding(
                "storage",
                False,
                str(exc),
                "check AZURE_STORAGE_CONNECTION_STRING / AZURE_STORAGE_ACCOUNT_* and "
                "AZURE_BLOB_CONTAINER_NAME, or CELLMATE_DATA_DIR for local files",
            )
        ]
    finally:
        await storage.close()
    kind = type(storage).__name__.removesuffix("Storage").replace("AzureBlob", "Azure Blob")
    return [Finding("storage", True, f"{kind} storage is writable")]


async def _model(settings: Settings) -> list[Finding]:
    client = build_model_client(settings.model)
    if client is None:
        return [
            Finding(
                "model",
                True,
                "not configured: chats run code blocks and /run only",
                required=False,
            )
        ]
    try:
        await client.models.list()
    except Exception as exc:  # every failure is a finding, whatever its type
        return [
            Finding(
                "model",
                False,
                f"the model endpoint refused or did not answer ({type(exc).__name__})",
                "check OPENAI_API_KEY / OPENAI_BASE_URL (or AZURE_OPENAI_*)",
            )
        ]
    finally:
        await client.close()
    return [
        Finding("model", True, f"the endpoint answers; model {settings.model.model}"),
        _history(settings),
    ]


def _history(settings: Settings) -> Finding:
    counter = Counter.for_model(settings.model.model)
    return Finding(
        "history",
        True,
        f"{settings.model.history_tokens:,} tokens of earlier messages per request "
        f"(CELLMATE_HISTORY_TOKENS), counted {counter.describe()}; older turns become a summary",
        required=False,
    )
