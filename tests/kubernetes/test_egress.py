"""Allowlist mode on the test cluster: a sandbox Pod reaches the network only through the
egress proxy, which knows it by its Pod address and asks the bot over its control port.

The proxy runs as `egressproxy --control` does in its Deployment, as a process in the
cluster's network namespace (the kit has no kube-proxy, so a Service would not route): it
listens for sandboxes on the Pod bridge's address and for the bot on the node's. Targets
live in a namespace the test creates and joins to the cluster's; nothing else is reached.
The kit's gVisor runs with `--network=none`, so these run under runc (the Deployment and
the policies that an enforcing plugin would apply are checked in tests/unit)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import random
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from bench.standins.doors import FixedDoors
from bench.standins.netns import listening_in, namespace
from bench.standins.package_index import COMPILED, PURE, serving_index
from bench.standins.tls_api import serving_api
from bot.conversations.keys import ConversationKey
from bot.ops.egress_link import cluster_proxy_ca, start_egress
from egressproxy.ca import installation_ca
from executor import Executor, SandboxLimits, Status, default_tag
from executor.kubernetes_backend import KubernetesBackend
from tests.kubernetes.conftest import KUBECONFIG, NO_POOL, TEST_INSTANCE, settings

pytestmark = [pytest.mark.kubernetes, pytest.mark.netns]

KIT_NETNS = os.environ.get("K8S_KIT_NETNS", "cellmate-k8s")
ROOT = Path(__file__).resolve().parents[2]
CONVERSATION = ConversationKey("slack", "T1", "C1", "1700000000.000200")
TOKEN = "cluster-" + "7" * 40


def node_address() -> str:
    """The node's address, as the admin kubeconfig names the API server."""
    config = yaml.safe_load(Path(KUBECONFIG).read_text())
    return str(urlsplit(config["clusters"][0]["cluster"]["server"]).hostname)


def bridge_address() -> str:
    """The Pod bridge's address in the cluster's namespace: the one a Pod reaches."""
    shown = subprocess.run(
        ["ip", "-n", KIT_NETNS, "-j", "-4", "addr", "show", "k8sbr0"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    return str(json.loads(shown)[0]["addr_info"][0]["local"])


@dataclass(frozen=True)
class ClusterProxy:
    proxy: tuple[str, int]
    """Where sandbox Pods reach it."""
    control: tuple[str, int]
    """Where the bot (this process, outside the cluster) reaches its control port."""
    control_in_cluster: tuple[str, int]
    """The control port itself, on the Pod bridge, as a Pod reaches it (no plugin here
    enforces the policy that admits only the bot's Pods)."""
    token_file: Path


# Relays the bot's connection from the node's address (which this host reaches) to the
# control port on the Pod bridge (which it does not): as a bot Pod reaches a proxy Pod.
RELAY = r"""
import asyncio, sys

async def pipe(reader, writer):
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()

async def serve(reader, writer):
    upstream_reader, upstream_writer = await asyncio.open_connection(sys.argv[3], int(sys.argv[4]))
    await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))

async def main():
    server = await asyncio.start_server(serve, sys.argv[1], int(sys.argv[2]))
    print("ready", flush=True)
    async with server:
        await server.serve_forever()

asyncio.run(main())
"""


@asynccontextmanager
async def proxy_in_cluster(tmp_path: Path, *options: str) -> AsyncIterator[ClusterProxy]:
    token_file = tmp_path / "egress-token"
    token_file.write_text(TOKEN)
    bridge = bridge_address()
    proxy = (bridge, random.randint(20000, 29999))  # noqa: S311
    in_cluster = (bridge, random.randint(30000, 34999))  # noqa: S311
    control = (node_address(), random.randint(35000, 39999))  # noqa: S311
    log = tmp_path / "egress-proxy.log"
    with log.open("wb") as written:
        process = await asyncio.create_subprocess_exec(
            "ip", "netns", "exec", KIT_NETNS,
            sys.executable, "-m", "egressproxy",
            "--listen", f"{proxy[0]}:{proxy[1]}",
            "--control", f"{in_cluster[0]}:{in_cluster[1]}",
            "--control-token-file", str(token_file),
            *options,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stderr=written,
        )  # fmt: skip
    relay = await asyncio.create_subprocess_exec(
        "ip", "netns", "exec", KIT_NETNS,
        sys.executable, "-c", RELAY, control[0], str(control[1]), *map(str, in_cluster),
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert relay.stdout is not None
        async with asyncio.timeout(60):
            assert await relay.stdout.readline() == b"ready\n", "the relay did not start"
            # The proxy's log says when its control port listens.
            while b"listens for the bot" not in log.read_bytes():
                assert process.returncode is None, log.read_text()
                await asyncio.sleep(0.1)
        yield ClusterProxy(proxy, control, in_cluster, token_file)
    finally:
        with contextlib.suppress(ProcessLookupError):
            relay.kill()
        await relay.wait()
        with contextlib.suppress(ProcessLookupError):
            process.terminate()
        await process.wait()


@asynccontextmanager
async def allowlist_executor(
    bot_kubeconfig: str, proxy: ClusterProxy, pip_index_url: str, ca_file: str = ""
) -> AsyncIterator[tuple[Executor, FixedDoors]]:
    chosen = dataclasses.replace(
        settings(bot_kubeconfig),
        egress_proxy=f"{proxy.proxy[0]}:{proxy.proxy[1]}",
        egress_control=f"{proxy.control[0]}:{proxy.control[1]}",
        egress_token_file=str(proxy.token_file),
        egress_ca_file=ca_file,
    )
    limits = SandboxLimits(
        runtime="runc",
        egress="allowlist",
        pip_index_url=pip_index_url,
        timeout_s=120,
        trusted_ca=cluster_proxy_ca(ca_file),  # as the bot's services read it
    )
    backend = KubernetesBackend(default_tag(), chosen, instance=TEST_INSTANCE)
    async with Executor(
        default_tag(), limits=limits, backend=backend, instance=TEST_INSTANCE, pool=NO_POOL
    ) as executor:
        doors = FixedDoors()
        link = await start_egress(executor, doors, proxy.proxy[1], "")
        try:
            yield executor, doors
        finally:
            await link.close()


def fetch(address: str, port: int, proxied: bool = True) -> str:
    """Code that fetches the target and prints the status and the body's size (or why not)."""
    opener = "urllib.request.build_opener()"
    if not proxied:
        opener = "urllib.request.build_opener(urllib.request.ProxyHandler({}))"
    return (
        "import urllib.request, urllib.error\n"
        "try:\n"
        f"    got = {opener}.open('http://{address}:{port}/data', timeout=10)\n"
        "    print(got.status, len(got.read()))\n"
        "except urllib.error.HTTPError as exc:\n"
        "    print(exc.code, exc.read().decode()[:200])\n"
        "except OSError as exc:\n"
        "    print('unreachable', type(exc).__name__)\n"
    )


async def test_a_sandbox_pod_goes_out_through_the_proxy_door_by_door(
    bot_kubeconfig: str, tmp_path: Path
) -> None:
    async with (
        namespace(parent=KIT_NETNS) as space,
        listening_in(space) as target,
        serving_index(space, tmp_path / "index") as index,
        proxy_in_cluster(tmp_path) as proxy,
        allowlist_executor(bot_kubeconfig, proxy, index.url) as (executor, doors),
    ):
        session = executor.session(CONVERSATION.id)
        door = f"{target.address}:{target.port}"

        closed = await session.run(fetch(target.address, target.port))
        assert closed.status is Status.OK, closed.stderr
        assert closed.stdout.startswith("403 "), closed.stdout
        assert "is not open to this channel" in closed.stdout
        assert doors.refused == [(target.address, target.port)]

        doors.open = (door, index.door)
        opened = await session.run(fetch(target.address, target.port))
        assert opened.stdout == "200 1000\n", opened.stdout + opened.stderr
        (hit,) = await target.wait_for(1)
        assert hit["peer"] == space.host_address  # from the proxy, in the cluster's namespace
        # The Pod itself has no route out: only the proxy's door.
        direct = await session.run(fetch(target.address, target.port, proxied=False))
        assert direct.stdout.startswith("unreachable"), direct.stdout
        assert len(target.hits) == 1

        # pip, through the same door, into the Pod's packages folder (a compiled wheel too).
        installed = await session.run(
            f"%pip install --no-color --progress-bar off {PURE} {COMPILED}\n"
            "import cmdemo_pure, cmdemo_fast\n"
            "print(cmdemo_pure.VALUE, cmdemo_fast.answer())"
        )
        assert installed.status is Status.OK, installed.stdout + installed.stderr
        assert installed.stdout.endswith("pure python, from the index 42\n"), installed.stdout

        # What the proxy told the bot: every request, by this conversation.
        verdicts = {(host, verdict) for owner, host, _, verdict, _ in doors.traffic}
        assert (target.address, "refused") in verdicts
        assert (target.address, "allowed") in verdicts
        assert {owner for owner, *_ in doors.traffic} == {CONVERSATION.id}


async def test_the_control_port_hears_no_one_without_the_token(
    bot_kubeconfig: str, tmp_path: Path
) -> None:
    """No plugin here enforces the policy that keeps sandboxes off the control port, so a
    Pod reaches it: the token is what it lacks, and the proxy closes on it unheard."""
    async with (
        namespace(parent=KIT_NETNS) as space,
        listening_in(space) as target,
        proxy_in_cluster(tmp_path) as proxy,
        allowlist_executor(bot_kubeconfig, proxy, "http://127.0.0.1:9/simple") as (
            executor,
            doors,
        ),
    ):
        session = executor.session(CONVERSATION.id)
        host, port = proxy.control_in_cluster
        forged = await session.run(
            "import json, socket\n"
            f"s = socket.create_connection(({host!r}, {port}), timeout=10)\n"
            "s.sendall(json.dumps({'hello': 'guessed', 'challenge': 'c' * 32}).encode() + b'\\n')\n"
            "s.sendall(json.dumps({'answer': 1, 'owner': 'x', 'operator': ['*']}).encode()"
            " + b'\\n')\n"
            "got = b''\n"
            "while chunk := s.recv(4096):\n"
            "    got += chunk\n"
            "said = [set(json.loads(line)) for line in got.splitlines()]\n"
            "print('closed' if said == [{'challenge'}] else 'answered', said)"
        )
        # A challenge, then nothing: no proof, no question.
        assert forged.stdout == "closed [{'challenge'}]\n", (forged.stdout, forged.error)
        # The bot is still the proxy's: a closed door is still closed, and asked about.
        closed = await session.run(fetch(target.address, target.port))
        assert closed.stdout.startswith("403 "), closed.stdout
        assert doors.refused == [(target.address, target.port)]
        assert target.hits == []


USE_THE_API = """
import os, pathlib, urllib.request
try:
    with urllib.request.urlopen('https://API/data', timeout=20) as answer:
        print('api says', answer.status, answer.read().decode())
except OSError as exc:
    print('failed', exc)
places = [pathlib.Path('/proc/self/environ'), *pathlib.Path('/tmp').rglob('*'),
          *pathlib.Path('/mnt/data').rglob('*')]
held = [str(p) for p in places if p.is_file() and b'SECRET' in p.read_bytes()]
print('secret held:', held, any('SECRET' in v for v in os.environ.values()))
"""
API = "api.example.test"
HEADER = "Bearer s3cret-for-the-cluster"  # the test's own secret


async def test_a_secret_from_the_proxys_secret_reaches_its_api_from_its_channel_only(
    bot_kubeconfig: str, tmp_path: Path
) -> None:
    """As the Deployment has it: the proxy reads secrets.json and its CA from a folder (the
    mounted Secret), the bot reads the CA's certificate alone, and sandboxes trust that."""
    mine = ConversationKey("slack", "T1", "C1", "1700000000.000300")
    theirs = ConversationKey("slack", "T1", "C2", "1700000000.000400")
    folder = tmp_path / "cellmate-egress-secrets"
    folder.mkdir()
    (folder / "secrets.json").write_text(
        json.dumps(
            [{"host": API, "channels": ["slack:T1:C1"], "headers": {"Authorization": HEADER}}]
        )
    )
    installation_ca(tmp_path / "ca")
    (folder / "mitmproxy-ca.pem").write_bytes((tmp_path / "ca" / "mitmproxy-ca.pem").read_bytes())
    bot_ca = tmp_path / "ca-cert.pem"  # the bot's mount: the certificate alone
    bot_ca.write_bytes((tmp_path / "ca" / "mitmproxy-ca-cert.pem").read_bytes())
    async with namespace(parent=KIT_NETNS) as space, serving_api(space, tmp_path, [API]) as api:
        (folder / "upstream-ca.pem").write_bytes(api.ca.read_bytes())
        async with (
            proxy_in_cluster(
                tmp_path, "--secrets-dir", str(folder), "--resolve", f"{API}={space.address}"
            ) as proxy,
            allowlist_executor(bot_kubeconfig, proxy, "http://127.0.0.1:9/simple", str(bot_ca)) as (
                executor,
                doors,
            ),
        ):
            doors.open = (API,)
            code = USE_THE_API.replace("API", API).replace("SECRET", "s3cret")
            used = await executor.session(mine.id).run(code)
            other = await executor.session(theirs.id).run(code)
        seen = await api.wait_for(1)
    assert used.stdout == "api says 200 ok\nsecret held: [] False\n", used.stdout + used.stderr
    assert [s["authorization"] for s in seen] == [HEADER]
    # Another channel's tunnel is the API's own TLS, which sandboxes do not trust.
    assert "CERTIFICATE_VERIFY_FAILED" in other.stdout, other.stdout
    assert len(api.seen) == 1
    for result in (used, other):
        assert "s3cret" not in result.stdout + result.stderr + result.message
