"""Azurite, Microsoft's Blob Storage emulator, started and stopped by the tests."""

from __future__ import annotations

import socket
import subprocess
import tempfile
import time
from pathlib import Path

from bench.standins.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
AZURITE = ROOT / ".tools" / "node_modules" / ".bin" / "azurite-blob"
ACCOUNT = "devstoreaccount1"
# Azurite's well-known development key (public, documented by Microsoft).
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


class Azurite:
    def __init__(self, port: int | None = None) -> None:
        if not AZURITE.exists():
            raise RuntimeError(f"Azurite is not installed at {AZURITE}: run `make azurite`")
        self.port = port or free_port()
        self.workdir = tempfile.TemporaryDirectory(prefix="cellmate-azurite-")
        self.process: subprocess.Popen[bytes] | None = None

    def connection_string(self, key: str = KEY) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={key};"
            f"BlobEndpoint=http://127.0.0.1:{self.port}/{ACCOUNT};"
        )

    def start(self) -> Azurite:
        self.process = subprocess.Popen(
            [
                str(AZURITE),
                "--blobHost",
                "127.0.0.1",
                "--blobPort",
                str(self.port),
                "--location",
                self.workdir.name,
                "--silent",
                "--skipApiVersionCheck",
                "--loose",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"Azurite exited with {self.process.returncode}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("Azurite did not listen within 30 s")

    def stop(self) -> None:
        # Killed, not terminated: once a client has connected, Azurite outlives SIGTERM for
        # more than 15 s, and what it holds is the test's own, thrown away with workdir.
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def close(self) -> None:
        self.stop()
        self.workdir.cleanup()
