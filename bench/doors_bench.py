"""What a network door costs: `python -m bench doors [--runtime runsc] [--samples N]`
(root: the targets live in a network namespace it creates).

From a warm sandbox, 1 KB GETs of a listener inside that namespace: straight over Docker's
bridge network (`CELLMATE_SANDBOX_NETWORK=true`, runc only) and through the egress proxy
(`CELLMATE_NETWORK=allowlist`), as plain proxied HTTP and as a CONNECT tunnel (what HTTPS
uses; TLS itself costs the same both ways); 30 sandboxes fetching at once; and `%pip install`
of a small wheel from a local index. Each GET is timed inside the sandbox, on a connection of
its own. Prints median and p95 in ms, the machine and the settings, and one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from bench.executor_bench import Figures, machine
from bench.standins.doors import FixedDoors, guarded_network
from bench.standins.netns import listening_in, namespace
from bench.standins.package_index import PURE, serving_index
from bot.conversations.keys import ConversationKey
from bot.ops.egress_link import start_egress
from bot.settings import load_settings
from executor import Executor, PoolSettings, SandboxLimits, Status
from executor.docker_backend import DockerBackend

INSTANCE = "bench-doors"
GUARD = Path(__file__).resolve().parents[1] / "scripts" / "guard-sandbox-network.sh"
AT_ONCE = 30
DIRECT = ConversationKey("bench", "", "", "direct").id
PROXIED = ConversationKey("bench", "", "", "proxied").id

GETS = """
import http.client, json, os, time, urllib.parse
proxy = os.environ.get('HTTP_PROXY')
times = []
for _ in range(COUNT):
    started = time.perf_counter()
    if proxy is None:
        connection = http.client.HTTPConnection('HOST', PORT, timeout=20)
        connection.request('GET', '/data')
    elif TUNNEL:
        where = urllib.parse.urlsplit(proxy)
        connection = http.client.HTTPConnection(where.hostname, where.port, timeout=20)
        connection.set_tunnel('HOST', PORT)
        connection.request('GET', '/data')
    else:
        where = urllib.parse.urlsplit(proxy)
        connection = http.client.HTTPConnection(where.hostname, where.port, timeout=20)
        connection.request('GET', 'http://HOST:PORT/data')
    answer = connection.getresponse()
    assert answer.status == 200 and len(answer.read()) == 1000, answer.status
    connection.close()
    times.append((time.perf_counter() - started) * 1000)
print(json.dumps(times))
"""


def gets(host: str, port: int, count: int, tunnel: bool = False) -> str:
    return (
        GETS.replace("HOST", host)
        .replace("PORT", str(port))
        .replace("COUNT", str(count))
        .replace("TUNNEL", str(tunnel))
    )


async def timed_gets(executor: Executor, key: str, code: str) -> list[float]:
    result = await executor.session(key).run(code)
    if result.status is not Status.OK:
        raise RuntimeError(f"the GETs failed: {result.stderr or result.message}")
    return [float(t) for t in json.loads(result.stdout)]


@asynccontextmanager
async def allowlist(limits: SandboxLimits, doors: FixedDoors) -> AsyncIterator[Executor]:
    async with guarded_network(INSTANCE, limits.proxy_port):
        backend = DockerBackend(limits_image(), instance=INSTANCE)
        async with Executor(
            limits_image(),
            limits=dataclasses.replace(limits, egress="allowlist"),
            backend=backend,
            instance=INSTANCE,
            pool=PoolSettings(size=0, max_live=AT_ONCE + 2),
        ) as executor:
            link = await start_egress(executor, doors, limits.proxy_port, "")
            try:
                yield executor
            finally:
                await link.close()


def limits_image() -> str:
    return load_settings().image


async def measure(limits: SandboxLimits, samples: int, figures: Figures) -> None:
    async with namespace() as space, listening_in(space) as listener:
        host, port = listener.address, listener.port
        if limits.runtime == "runc":
            bridged = dataclasses.replace(limits, network=True)
            async with Executor(
                limits_image(), limits=bridged, instance=INSTANCE, pool=PoolSettings(size=0)
            ) as executor:
                await timed_gets(executor, DIRECT, gets(host, port, 3))  # warm
                direct = await timed_gets(executor, DIRECT, gets(host, port, samples))
                figures.add("GET 1 KB, direct (bridge network)", direct, "direct_get")
        doors = FixedDoors(f"{host}:{port}")
        async with allowlist(limits, doors) as executor:
            await timed_gets(executor, PROXIED, gets(host, port, 3))
            proxied = await timed_gets(executor, PROXIED, gets(host, port, samples))
            figures.add("GET 1 KB through the egress proxy", proxied, "proxied_get")
            tunnel = await timed_gets(executor, PROXIED, gets(host, port, samples, tunnel=True))
            figures.add("GET 1 KB through a CONNECT tunnel", tunnel, "tunnel_get")
            keys = [ConversationKey("bench", "", "", f"at-once-{n}").id for n in range(AT_ONCE)]
            for key in keys:  # started first: what is timed is the fetching
                await executor.session(key).run("pass")
            started = time.monotonic()
            results = await asyncio.gather(
                *(executor.session(key).run(gets(host, port, 1)) for key in keys)
            )
            wall = (time.monotonic() - started) * 1000
            ok = sum(r.status is Status.OK for r in results)
            figures.summary["at_once_fetched"] = f"{ok}/{AT_ONCE}"
            figures.summary["at_once_wall_ms"] = round(wall, 1)
            runs = [float(r.duration_ms) for r in results]
            figures.add(f"{AT_ONCE} sandboxes fetching at once (each run)", runs, "at_once")
    with tempfile.TemporaryDirectory() as folder:
        async with namespace() as space, serving_index(space, Path(folder)) as index:
            doors = FixedDoors(index.door)
            with_index = dataclasses.replace(limits, pip_index_url=index.url)
            async with allowlist(with_index, doors) as executor:
                installs: list[float] = []
                for n in range(max(3, samples // 5)):
                    session = executor.session(ConversationKey("bench", "", "", f"pip-{n}").id)
                    await session.run("pass")
                    began = time.monotonic()
                    done = await session.run(f"%pip install --progress-bar off {PURE}")
                    installs.append((time.monotonic() - began) * 1000)
                    if "Successfully installed" not in done.stdout:
                        raise RuntimeError(f"pip install failed: {done.stdout[-500:]}")
                figures.add("%pip install of a small wheel", installs, "pip_install")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench doors")
    parser.add_argument("--runtime", choices=["runc", "runsc"], help="default: the settings'")
    parser.add_argument("--samples", type=int, default=50, help="GETs per figure")
    args = parser.parse_args(argv)
    limits = load_settings().sandbox
    if args.runtime:
        limits = dataclasses.replace(limits, runtime=args.runtime)
    figures = Figures()
    print(f"machine: {machine()}")
    print(
        f"settings: runtime {limits.runtime}, memory {limits.memory_mb} MB, cpus {limits.cpus}, "
        f"{args.samples} GETs per figure, proxy port {limits.proxy_port}, image {limits_image()}"
    )
    asyncio.run(measure(limits, args.samples, figures))
    if "direct_get_p50_ms" in figures.summary:
        figures.summary["proxy_adds_p50_ms"] = round(
            figures.summary["proxied_get_p50_ms"] - figures.summary["direct_get_p50_ms"], 1
        )
    figures.summary["runtime"] = limits.runtime
    print(f"{'figure':48} {'p50 ms':>9} {'p95 ms':>9} {'n':>5}")
    for name, p50, p95, count in figures.rows:
        print(f"{name:48} {p50:9.1f} {p95:9.1f} {count:5}")
    print(json.dumps(figures.summary))
    return 0
