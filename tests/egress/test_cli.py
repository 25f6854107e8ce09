"""`cellmate egress-proxy` as a process of its own, on loopback: it serves the owners file,
refuses and logs what it refuses without the request's secrets, and stops on SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
import tempfile
from pathlib import Path

from egressproxy import REFUSED_HEADER

TIMEOUT_S = 15


async def test_the_command_refuses_closed_doors_and_logs_no_secret(tmp_path: Path) -> None:
    owners = tmp_path / "owners.json"
    owners.write_text(json.dumps({"127.0.0.1": {"owner": "console:me", "channel": ["a.test"]}}))
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "egressproxy",
        "--listen",
        "127.0.0.1:0",
        "--owners",
        str(owners),
        "--private-allowed",
        "db.internal:5432",
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )
    assert process.stderr is not None
    try:
        async with asyncio.timeout(TIMEOUT_S):
            while not (
                found := re.search(
                    rb"on 127\.0\.0\.1:([0-9]+)", line := await process.stderr.readline()
                )
            ):
                assert line, "the proxy ended before it listened"
            port = int(found[1])
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(
                b"GET http://closed.test/export?token=sk-cellmate-test-secret HTTP/1.1\r\n"
                b"Host: closed.test\r\nAuthorization: Bearer sk-cellmate-test-secret\r\n"
                b"Connection: close\r\n\r\n"
            )
            answer = await reader.read()
            writer.close()
            assert answer.startswith(b"HTTP/1.1 403 ")
            assert f"{REFUSED_HEADER}: closed.test:80".encode() in answer
            assert answer.endswith(b"\r\n\r\nclosed.test is not open to this channel\n")
            process.send_signal(signal.SIGTERM)
            assert await process.wait() == 0
            log = await process.stderr.read()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    line = json.loads(
        next(x for x in log.decode().splitlines() if '"event": "egress"' in x).partition(": ")[2]
    )
    assert line["verdict"] == "refused"
    assert (line["owner"], line["host"], line["port"]) == ("console:me", "closed.test", 80)
    assert b"sk-cellmate-test-secret" not in log
    assert b"/export" not in log


async def proxy_said(*options: str) -> tuple[int | None, str]:
    """Start the command with `options`, stop it once it serves (or see it exit): its exit
    code (None: it served) and its log."""
    command = [sys.executable, "-m", "egressproxy", "--listen", "127.0.0.1:0", *options]
    process = await asyncio.create_subprocess_exec(*command, stderr=asyncio.subprocess.PIPE)
    assert process.stderr is not None
    log = ""
    async with asyncio.timeout(60):
        while line := (await process.stderr.readline()).decode():
            log += line
            if "serving Cellmate sandboxes' egress" in line:
                process.send_signal(signal.SIGTERM)
                log += (await process.stderr.read()).decode()
                await process.wait()
                return None, log
    return await process.wait(), log


def ca_copies() -> set[Path]:
    """The private copies of a CA that proxies with --secrets-dir made and left."""
    return set(Path(tempfile.gettempdir()).glob("cellmate-egress-ca-*"))


async def test_a_secrets_folder_is_read_as_a_mounted_secret_is(tmp_path: Path) -> None:
    owners = tmp_path / "owners.json"
    owners.write_text("{}")
    folder = tmp_path / "secrets"
    folder.mkdir()
    # An empty folder (the Secret is optional): served, without secrets.
    code, log = await proxy_said("--owners", str(owners), "--secrets-dir", str(folder))
    assert code is None, log
    assert "no secrets.json" in log
    # Secrets without their CA: refused, naming the file and how to make it.
    (folder / "secrets.json").write_text(json.dumps([{"host": "a.test", "headers": {"A": "b"}}]))
    code, log = await proxy_said("--owners", str(owners), "--secrets-dir", str(folder))
    assert code not in (None, 0)
    assert "mitmproxy-ca.pem (python -m egressproxy.ca)" in log
    # With the CA (made as the README says): served, and the CA's copy gone afterwards.
    made = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "egressproxy.ca", str(folder), stdout=asyncio.subprocess.PIPE
    )
    said, _ = await made.communicate()
    assert made.returncode == 0
    assert b"mitmproxy-ca-cert.pem: certificate (sandboxes trust it)" in said
    before = ca_copies()
    code, log = await proxy_said("--owners", str(owners), "--secrets-dir", str(folder))
    assert code is None, log
    assert ca_copies() == before
    # One way or the other, not both.
    code, log = await proxy_said(
        "--owners", str(owners), "--secrets-dir", str(folder), "--secrets", str(owners)
    )
    assert code not in (None, 0)
    assert "give one or the others" in log
