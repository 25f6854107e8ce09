"""Executor latency and footprint:
`python -m bench executor [--runtime runsc] [--backend kubernetes] [--samples N]`.

Prints a table of median and p95 figures (milliseconds unless named otherwise), the machine
and the settings, and as its last line one JSON object with the headline figures.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import platform
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import docker

from bot.settings import load_settings
from bot.workspaces import StoredWorkspaces
from executor import ExecutionResult, Executor, PoolSettings, SandboxLimits, Status
from executor.docker_backend import DockerBackend, connect
from executor.docker_specs import INSTANCE_LABEL
from executor.kubernetes_backend import KubernetesBackend
from executor.protocol import SandboxBackend
from executor.workspace import WorkspaceSettings
from storage.local import LocalStorage

INSTANCE = "bench"
TRIVIAL = "x += 1; x"
CHART = "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()"
DATAFRAME = "import pandas as pd\npd.DataFrame({'a': [1, 2, 3], 'b': ['x', 'y', 'z']})"


@dataclasses.dataclass
class Figures:
    rows: list[tuple[str, float, float, int]] = dataclasses.field(default_factory=list)
    summary: dict[str, Any] = dataclasses.field(default_factory=dict)

    def add(self, name: str, samples: list[float], key: str | None = None) -> None:
        p50, p95 = statistics.median(samples), percentile(samples, 0.95)
        self.rows.append((name, p50, p95, len(samples)))
        if key:
            self.summary[f"{key}_p50_ms"] = round(p50, 1)
            self.summary[f"{key}_p95_ms"] = round(p95, 1)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


async def timed(call: Callable[[], Awaitable[ExecutionResult]]) -> float:
    started = time.perf_counter()
    result = await call()
    elapsed = (time.perf_counter() - started) * 1000
    if result.status is not Status.OK:
        raise SystemExit(f"benchmark run failed: {result.status} {result.message} {result.error}")
    return elapsed


async def until(predicate: Callable[[], bool]) -> None:
    async with asyncio.timeout(120):
        while not predicate():  # noqa: ASYNC110 (polls pool counters)
            await asyncio.sleep(0.05)


async def measure(
    image: str,
    limits: SandboxLimits,
    samples: int,
    figures: Figures,
    backend: Callable[[], SandboxBackend | None],
) -> None:
    # No warmed template here: a cold session is a kernel started and warmed (the template
    # is measured on its own, in measure_snapshots).
    pool = PoolSettings(size=2, max_live=40, queue_limit=50, template=False)
    async with Executor(
        image, limits=limits, backend=backend(), instance=INSTANCE, pool=pool
    ) as executor:
        await until(lambda: executor.pool.ready == pool.size)

        warm = executor.session("follow-up")
        await warm.run("x = 0")
        follow = [await timed(lambda: warm.run(TRIVIAL)) for _ in range(samples * 5)]
        figures.add("follow-up run, warm session", follow, "follow_up")

        first: list[float] = []
        charts: list[float] = []
        frames: list[float] = []
        for i in range(samples):
            await until(lambda: executor.pool.ready == pool.size)
            first.append(await timed(partial(executor.session(f"new-{i}").run, "x = 1; x")))
            await until(lambda: executor.pool.ready == pool.size)
            charts.append(await timed(partial(executor.session(f"chart-{i}").run, CHART)))
            await until(lambda: executor.pool.ready == pool.size)
            frames.append(await timed(partial(executor.session(f"frame-{i}").run, DATAFRAME)))
            for kind in ("new", "chart", "frame"):
                await executor.session(f"{kind}-{i}").close()
        figures.add("first run, new session from the pool", first, "pool_first_run")
        figures.add("first chart, new session from the pool", charts)
        figures.summary["first_chart_ms"] = round(statistics.median(charts), 1)
        figures.add("first DataFrame, new session from the pool", frames)
        figures.summary["first_dataframe_ms"] = round(statistics.median(frames), 1)

        notebook: list[float] = []
        for _ in range(samples):
            await until(lambda: executor.pool.ready == pool.size)
            notebook.append(await timed(lambda: executor.run_notebook("x = 1; x")))
        figures.add("notebook-mode run from the pool", notebook, "notebook_run")

        for count in (10, 30):
            sessions = [executor.session(f"busy-{count}-{i}") for i in range(count)]
            # A cell that imports waits for its sandbox's warm-up, and the pool refills: the
            # rounds then time runs, not sandboxes starting and importing beside them.
            await asyncio.gather(*(s.run("import sys; x = 0") for s in sessions))
            await until(lambda: executor.pool.ready == pool.size)
            rounds: list[float] = []
            for _ in range(max(3, samples // 2)):
                rounds += await asyncio.gather(*(timed(partial(s.run, TRIVIAL)) for s in sessions))
            figures.add(f"{count} sessions running at once", rounds, f"concurrent{count}")
            if count == 10 and not isinstance(executor.backend, KubernetesBackend):
                figures.summary["idle_session_mib"] = round(idle_memory_mib(executor), 1)
                figures.summary["idle_session_cpu_pct"] = round(await idle_cpu_percent(), 2)
            for s in sessions:
                await s.close()

    cold = dataclasses.replace(pool, size=0)
    async with Executor(
        image, limits=limits, backend=backend(), instance=INSTANCE, pool=cold
    ) as executor:
        cold_runs = [
            await timed(partial(executor.session(f"cold-{i}").run, "x = 1; x"))
            for i in range(samples)
        ]
        figures.add("first run, cold session (no pool)", cold_runs)
        figures.summary["cold_session_ms"] = round(statistics.median(cold_runs), 1)


WORKSPACE = (
    "import numpy as np, pandas as pd, os\n"
    "df = pd.DataFrame(np.random.rand(131_072, 10))\n"  # 10 MB
    "for i in range(2):\n"
    "    open(f'part{i}.bin', 'wb').write(os.urandom(10 * 1024 * 1024))\n"  # 20 MB of files
)


async def measure_workspaces(
    image: str,
    limits: SandboxLimits,
    samples: int,
    figures: Figures,
    backend: Callable[[], SandboxBackend | None],
) -> None:
    """Saving a workspace (a 10 MB DataFrame and 20 MB of files) when its session ends, and
    the first run of the next session, which restores it first (local storage)."""
    pool = PoolSettings(size=2, max_live=10, idle_timeout_s=0.01, template=False)
    with tempfile.TemporaryDirectory() as folder:
        async with keeping_workspaces(image, limits, pool, Path(folder), backend()) as executor:
            saves: list[float] = []
            restores: list[float] = []
            for i in range(samples):
                session = executor.session(f"workspace-{i}")
                await timed(partial(session.run, WORKSPACE))
                await asyncio.sleep(0.02)
                started = time.perf_counter()
                await executor.sessions.reap()
                await asyncio.gather(*executor.sessions._saving.values())
                saves.append((time.perf_counter() - started) * 1000)
                await until(lambda: executor.pool.ready == pool.size)
                restores.append(await timed(partial(session.run, "df.shape")))
                await session.close()
        figures.add("workspace saved (10 MB DataFrame, 20 MB files)", saves, "snapshot")
        figures.add("first run restoring that workspace", restores, "restore")
        figures.summary["snapshot_ms"] = round(statistics.median(saves), 1)
        figures.summary["restore_ms"] = round(statistics.median(restores), 1)


BIG_FRAME = (
    "import numpy as np, pandas as pd\n"
    "df = pd.DataFrame(np.random.rand(3_300_000, 8))\n"  # 200 MB
    "int(df.memory_usage().sum() / 2**20)"
)


async def measure_snapshots(
    image: str, limits: SandboxLimits, samples: int, figures: Figures, paused_count: int
) -> None:
    """gVisor on Docker: the first run of a cold session cloned from the warmed template; a
    session holding a 200 MB DataFrame paused, then resumed by its next run; and the host
    memory that `paused_count` paused idle sessions hold."""
    cloned = PoolSettings(size=0, max_live=40, template=True)
    async with Executor(image, limits=limits, instance=INSTANCE, pool=cloned) as executor:
        backend = executor.backend
        assert isinstance(backend, DockerBackend)
        await executor.session("template").run("x = 1")  # a cold start makes the template
        firsts: list[float] = []
        for i in range(samples):
            if not await backend.templates.warmed(limits):
                raise SystemExit("the warmed template could not be made")
            firsts.append(await timed(partial(executor.session(f"clone-{i}").run, "x = 1; x")))
            await executor.session(f"clone-{i}").close()
        figures.add("first run, cold session from the warmed template", firsts)
        figures.summary["template_cold_session_ms"] = round(statistics.median(firsts), 1)

    with tempfile.TemporaryDirectory() as folder:
        pool = PoolSettings(size=0, max_live=paused_count + 2, template=False)
        async with keeping_workspaces(image, limits, pool, Path(folder)) as executor:
            pauses: list[float] = []
            resumes: list[float] = []
            for i in range(max(3, samples // 3)):
                session = executor.session(f"paused-{i}")
                await timed(partial(session.run, BIG_FRAME))
                started = time.perf_counter()
                if (why := await session.pause()) is not None:
                    raise SystemExit(f"the session could not be paused: {why}")
                pauses.append((time.perf_counter() - started) * 1000)
                resumes.append(await timed(partial(session.run, "df.shape")))
                await session.close()
            figures.add("pause, session holding a 200 MB DataFrame", pauses)
            figures.add("resume and first run of that session", resumes)
            figures.summary["pause_ms"] = round(statistics.median(pauses), 1)
            figures.summary["resume_ms"] = round(statistics.median(resumes), 1)

            sessions = [executor.session(f"idle-{i}") for i in range(paused_count)]
            before = host_memory_used_mib()
            await asyncio.gather(*(s.run("import numpy, pandas; x = 1") for s in sessions))
            live = host_memory_used_mib()
            for session in sessions:
                await session.pause()
            paused = host_memory_used_mib()
            figures.summary["live_idle_mib"] = round((live - before) / paused_count, 1)
            figures.summary["paused_idle_mib"] = round(max(0.0, paused - before) / paused_count, 1)
            for session in sessions:
                await session.close()


def keeping_workspaces(
    image: str,
    limits: SandboxLimits,
    pool: PoolSettings,
    folder: Path,
    backend: SandboxBackend | None = None,
) -> Executor:
    """An executor whose sessions keep their workspaces in local storage under `folder`."""
    secret = os.urandom(32)
    return Executor(
        image,
        limits=limits,
        backend=backend,
        instance=INSTANCE,
        pool=pool,
        workspaces=StoredWorkspaces(LocalStorage(folder, secret), secret, timedelta(days=1)),
        workspace_settings=WorkspaceSettings(max_mb=100),
    )


def host_memory_used_mib() -> float:
    """The host's memory in use (total less available: page cache the kernel can drop, such
    as checkpoint files just written, does not count)."""
    fields = dict(
        line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines() if ":" in line
    )
    total = int(fields["MemTotal"].split()[0])
    available = int(fields["MemAvailable"].split()[0])
    return (total - available) / 1024


def idle_memory_mib(executor: Executor) -> float:
    """Memory of the idle session sandboxes (cgroup usage less reclaimable page cache)."""
    client = connect()
    try:
        usages = []
        for container in client.containers.list(filters={"label": f"{INSTANCE_LABEL}={INSTANCE}"}):
            reading: Any = container.stats(stream=False)
            stats = reading["memory_stats"]
            inner = stats.get("stats", {})
            cache = inner.get("total_inactive_file", inner.get("inactive_file", 0))
            if stats.get("usage"):
                usages.append((stats["usage"] - cache) / 2**20)
        return statistics.median(usages) if usages else float("nan")
    finally:
        client.close()


async def idle_cpu_percent(seconds: float = 10.0) -> float:
    """CPU time an idle session sandbox uses (the median of this instance's sandboxes, in
    percent of one core, over `seconds`): the runtime's own work and the runner's, while the
    kernel rests."""

    def usage() -> dict[str, int]:
        client = connect()
        try:
            found = client.containers.list(filters={"label": f"{INSTANCE_LABEL}={INSTANCE}"})
            readings: dict[str, Any] = {
                str(c.id): c.stats(stream=False, one_shot=True) for c in found
            }
            return {
                key: int(r["cpu_stats"]["cpu_usage"]["total_usage"]) for key, r in readings.items()
            }
        finally:
            client.close()

    before = await asyncio.to_thread(usage)
    await asyncio.sleep(seconds)
    after = await asyncio.to_thread(usage)
    used = [(after[key] - before[key]) / 1e9 / seconds * 100 for key in before if key in after]
    return statistics.median(used) if used else float("nan")


def baseline(image: str, runtime: str, samples: int, figures: Figures) -> None:
    """A per-call `docker run` + `jupyter nbconvert --execute` of the same code."""
    cell = {"cell_type": "code", "id": "c1", "source": "x = 1; x", "metadata": {}, "outputs": []}
    kernelspec = {"name": "python3", "display_name": "Python 3"}
    document = json.dumps(
        {
            "nbformat": 4,
            "nbformat_minor": 5,
            "metadata": {"kernelspec": kernelspec},
            "cells": [{**cell, "execution_count": None}],
        }
    )
    command = [
        "docker",
        "run",
        "--rm",
        "-i",
        "--network",
        "none",
        f"--runtime={runtime}",
        "--entrypoint",
        "/opt/venv/bin/jupyter",
        image,
        "nbconvert",
        "--execute",
        "--to",
        "notebook",
        "--stdin",
        "--stdout",
    ]
    runs = []
    for _ in range(max(3, samples // 2)):
        started = time.perf_counter()
        done = subprocess.run(command, input=document, capture_output=True, text=True, check=False)
        runs.append((time.perf_counter() - started) * 1000)
        outputs = json.loads(done.stdout or "{}").get("cells", [{}])[0].get("outputs", [])
        if done.returncode != 0 or not any("execute_result" in str(o) for o in outputs):
            raise SystemExit(f"baseline failed: {done.stderr[-2000:]}")
    figures.add("baseline: docker run + nbconvert --execute", runs)
    figures.summary["baseline_nbconvert_ms"] = round(statistics.median(runs), 1)


def machine() -> str:
    client: docker.DockerClient = connect()
    version = client.version().get("Version")
    client.close()
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    system = f"{platform.system()} {platform.release()}"
    return f"{os.cpu_count()} cores, {memory_gib:.0f} GiB, {system}, Docker {version}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench executor")
    parser.add_argument(
        "--runtime", choices=["runc", "runsc"], help="default: the settings' runtime"
    )
    parser.add_argument(
        "--samples", type=int, default=10, help="samples per figure (follow-ups: 5x)"
    )
    parser.add_argument(
        "--backend",
        choices=["docker", "kubernetes"],
        help="default: CELLMATE_EXECUTOR_BACKEND (kubernetes reads CELLMATE_KUBERNETES_*)",
    )
    parser.add_argument(
        "--paused", type=int, default=30, help="idle sessions paused for paused_idle_mib (runsc)"
    )
    parser.add_argument(
        "--skip-snapshots", action="store_true", help="runsc: leave out pause, resume, template"
    )
    args = parser.parse_args(argv)
    settings = load_settings()
    if args.backend:
        settings = dataclasses.replace(settings, executor_backend=args.backend)
    limits = settings.sandbox
    if args.runtime:
        limits = dataclasses.replace(limits, runtime=args.runtime)
    figures = Figures()
    print(f"machine: {machine()}")
    print(
        f"settings: runtime {limits.runtime}, memory {limits.memory_mb} MB, cpus {limits.cpus}, "
        f"preload {','.join(limits.preloaded()) or 'none'}, "
        f"pool 2 ready, {args.samples} samples, image {settings.image}, "
        f"backend {settings.executor_backend}"
        + (f" (namespace {settings.kubernetes.namespace})" if settings.sandbox_backend() else "")
    )
    baseline(settings.image, limits.runtime, args.samples, figures)
    asyncio.run(
        measure(
            settings.image,
            limits,
            args.samples,
            figures,
            backend=lambda: dataclasses.replace(settings, sandbox=limits).sandbox_backend(),
        )
    )
    asyncio.run(
        measure_workspaces(
            settings.image,
            limits,
            args.samples,
            figures,
            backend=lambda: dataclasses.replace(settings, sandbox=limits).sandbox_backend(),
        )
    )
    if (
        limits.runtime == "runsc"
        and settings.executor_backend == "docker"
        and not args.skip_snapshots
    ):
        asyncio.run(measure_snapshots(settings.image, limits, args.samples, figures, args.paused))
    follow_up = figures.summary["follow_up_p50_ms"]
    figures.summary["speedup_vs_baseline"] = round(
        figures.summary["baseline_nbconvert_ms"] / follow_up, 1
    )
    figures.summary["runtime"] = limits.runtime
    figures.summary["preload"] = ",".join(limits.preloaded())
    figures.summary["backend"] = settings.executor_backend
    print(f"{'figure':48} {'p50 ms':>9} {'p95 ms':>9} {'n':>5}")
    for name, p50, p95, count in figures.rows:
        print(f"{name:48} {p50:9.1f} {p95:9.1f} {count:5}")
    if "idle_session_mib" in figures.summary:
        print(f"{'idle session memory (MiB)':48} {figures.summary['idle_session_mib']:9.1f}")
        cpu = figures.summary["idle_session_cpu_pct"]
        print(f"{'idle session CPU (% of a core)':48} {cpu:9.2f}")
    for key, name in (
        ("live_idle_mib", "host memory per live idle session (MiB)"),
        ("paused_idle_mib", "host memory per paused idle session (MiB)"),
    ):
        if key in figures.summary:
            print(f"{name:48} {figures.summary[key]:9.1f}")
    print(json.dumps(figures.summary))
    return 0
