"""How long notebook-mode runs take, end to end, for each runtime.

    python -m bench [--runs N] [--runtime runc --runtime runsc]

Prints, per case and runtime, the median and p95 of: the whole call (container created,
kernel started, code run, files fetched, container removed), the sandbox start-up up to a
ready kernel, and the code's own run time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import time
from dataclasses import replace

from bot.settings import load_settings
from executor import Executor, Status
from executor.docker_backend import connect

CASES = {
    "print": "print('hello')",
    "pandas+chart": (
        "import pandas as pd, matplotlib.pyplot as plt\n"
        "df = pd.DataFrame({'x': range(100), 'y': [i * i for i in range(100)]})\n"
        "df.plot(x='x', y='y')\nplt.show()\ndf.to_csv('/mnt/data/out.csv')"
    ),
}


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def describe_machine() -> str:
    client = connect()
    engine = client.version()
    client.close()
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{platform.node()}: {os.cpu_count()} cores, {memory_gib:.0f} GiB, {platform.system()} "
        f"{platform.release()}, Docker {engine.get('Version')}"
    )


async def bench(runtime: str, runs: int) -> list[str]:
    settings = load_settings()
    limits = replace(settings.sandbox, runtime=runtime)  # type: ignore[arg-type]
    lines = []
    async with Executor(settings.image, limits=limits, instance="bench") as executor:
        await executor.run_notebook("pass")  # warm the engine's caches
        for case, code in CASES.items():
            totals: list[float] = []
            startups: list[float] = []
            runs_ms: list[float] = []
            for _ in range(runs):
                started = time.perf_counter()
                result = await executor.run_notebook(code)
                totals.append((time.perf_counter() - started) * 1000)
                if result.status is not Status.OK:
                    raise SystemExit(
                        f"{case} failed under {runtime}: {result.message} {result.error}"
                    )
                startups.append(result.startup_ms)
                runs_ms.append(result.duration_ms)
            lines.append(
                f"{runtime:6} {case:13} "
                + "  ".join(
                    f"{name} median {statistics.median(v):6.0f} p95 {percentile(v, 0.95):6.0f}"
                    for name, v in (("call", totals), ("start", startups), ("code", runs_ms))
                )
            )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--runtime", action="append", choices=["runc", "runsc"])
    args = parser.parse_args()
    settings = load_settings()
    limits = settings.sandbox
    print(describe_machine())
    print(
        f"settings: {args.runs} runs per case, memory {limits.memory_mb} MB, cpus {limits.cpus}, "
        f"image {settings.image}; times in ms"
    )
    for runtime in args.runtime or ["runc", "runsc"]:
        for line in asyncio.run(bench(runtime, args.runs)):
            print(line, flush=True)
    return 0
