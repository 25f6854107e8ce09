"""`python -m bench languages [--runtime runc|runsc] [--samples N]`: what each language costs.

For R, JavaScript, TypeScript and Bash (and Python, to compare): the first run in that
language in a warm session (its kernel starts), a follow-up run in it, and the memory of an
idle session sandbox with Python only and with every language's kernel started; and, with
R, saving a workspace of R variables (a 100,000-row data frame and a model fitted on it,
with ggplot2 attached) when its session ends, and the first R run of the next session,
which starts R's kernel and loads them. Printed as median and p95 with the machine and
settings, then one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

from bench.executor_bench import Figures, idle_memory_mib, keeping_workspaces, machine, timed
from bot.settings import load_settings
from executor import Executor, PoolSettings, SandboxLimits

INSTANCE = "bench"
"""The label `idle_memory_mib` measures (bench.executor_bench's)."""
SNIPPETS = {
    "python": "x = 1 + 1",
    "r": "x <- 1 + 1",
    "javascript": "var x = 1 + 1;",
    "typescript": "let y: number = 1 + 1;",
    "bash": "x=$((1 + 1))",
}


async def measure(image: str, limits: SandboxLimits, samples: int, figures: Figures) -> None:
    languages = ("python", *limits.other_languages)
    pool = PoolSettings(size=1, max_live=4, template=False)
    async with Executor(image, limits=limits, instance=INSTANCE, pool=pool) as executor:
        for language in languages:
            firsts, follows = [], []
            for index in range(samples):
                session = executor.session(f"{language}-{index}")
                await session.run("0")  # the sandbox is the session's: only the kernel starts
                run = partial(session.run, SNIPPETS[language], language=language)
                firsts.append(await timed(run))
                for _ in range(3):
                    follows.append(await timed(run))
                await session.close()
            figures.add(f"{language}: first run (its kernel starts)", firsts, f"{language}_first")
            figures.add(f"{language}: follow-up run", follows, f"{language}_follow_up")
    # No sandbox waits in a pool here: the only one measured is the session's.
    idle = PoolSettings(size=0, template=False)
    async with Executor(image, limits=limits, instance=INSTANCE, pool=idle) as executor:
        python_only = executor.session("idle-python")
        await python_only.run("0")
        await asyncio.sleep(3)  # the kernels settle before their memory is read
        figures.summary["idle_python_only_mib"] = round(idle_memory_mib(executor), 1)
        await python_only.close()
        every = executor.session("idle-every")
        for language in languages:
            await every.run(SNIPPETS[language], language=language)
        await asyncio.sleep(3)
        figures.summary["idle_every_language_mib"] = round(idle_memory_mib(executor), 1)
        await every.close()


R_WORKSPACE = (
    "library(ggplot2)\n"
    "frame <- data.frame(x = runif(1e5), y = runif(1e5), group = sample(letters, 1e5, TRUE))\n"
    "model <- lm(y ~ x + group, data = frame)"
)


async def measure_r_workspace(
    image: str, limits: SandboxLimits, samples: int, figures: Figures
) -> None:
    """An R workspace saved when its session ends, and the next session's first R run."""
    pool = PoolSettings(size=1, max_live=4, idle_timeout_s=0.01, template=False)
    with tempfile.TemporaryDirectory() as folder:
        async with keeping_workspaces(image, limits, pool, Path(folder)) as executor:
            saves: list[float] = []
            restores: list[float] = []
            for index in range(samples):
                session = executor.session(f"r-workspace-{index}")
                await session.run(R_WORKSPACE, language="r")
                await asyncio.sleep(0.02)
                started = time.perf_counter()
                await executor.sessions.reap()
                await asyncio.gather(*executor.sessions._saving.values())
                saves.append((time.perf_counter() - started) * 1000)
                restores.append(await timed(partial(session.run, "nrow(frame)", language="r")))
                await session.close()
    figures.add("R workspace saved (100,000 rows and a model)", saves, "r_workspace_saved")
    figures.add("first R run restoring that workspace", restores, "r_workspace_restored")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench languages")
    parser.add_argument("--runtime", choices=["runc", "runsc"], help="default: the settings'")
    parser.add_argument("--samples", type=int, default=5, help="new sessions per language")
    args = parser.parse_args(argv)
    settings = load_settings()
    limits = settings.sandbox
    if args.runtime:
        limits = dataclasses.replace(limits, runtime=args.runtime)
    figures = Figures()
    print(f"machine: {machine()}")
    print(
        f"settings: runtime {limits.runtime}, memory {limits.memory_mb} MB, languages "
        f"python,{','.join(limits.other_languages)}, {args.samples} sessions per language, "
        f"image {settings.image}"
    )
    asyncio.run(measure(settings.image, limits, args.samples, figures))
    if "r" in limits.other_languages:
        asyncio.run(measure_r_workspace(settings.image, limits, args.samples, figures))
    print(f"{'figure':48} {'p50 ms':>9} {'p95 ms':>9} {'n':>5}")
    for name, p50, p95, count in figures.rows:
        print(f"{name:48} {p50:9.1f} {p95:9.1f} {count:5}")
    print(
        f"{'idle session memory, Python only (MiB)':48} "
        f"{figures.summary['idle_python_only_mib']:9.1f}"
    )
    print(
        f"{'idle session memory, every kernel (MiB)':48} "
        f"{figures.summary['idle_every_language_mib']:9.1f}"
    )
    print(json.dumps({**figures.summary, "runtime": limits.runtime}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
