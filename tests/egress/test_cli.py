"""`cellmate egress-proxy` as a process of its own, on loopback: it serves the owners file,
refuses and logs what it refuses without the request's secrets, and stops on SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
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
