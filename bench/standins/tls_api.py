"""An HTTPS "data API" with a CA of its own, served from inside a network namespace the test
creates: it answers every name its certificate holds, and records each request's line,
host and the headers that carry credentials."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from bench.standins.netns import Namespace, recording_in

WAIT_S = 15.0

SERVER = r"""
import asyncio, json, ssl, sys

context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
context.load_cert_chain(sys.argv[2], sys.argv[3])

async def serve(reader, writer):
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
        writer.close()
        return
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    target = lines[0].split(" ")[1]
    print(json.dumps({"line": lines[0], "host": headers.get("host"),
                      "authorization": headers.get("authorization"),
                      "x-api-key": headers.get("x-api-key")}), flush=True)
    if target.startswith("/redirect?to="):
        writer.write(b"HTTP/1.1 302 Found\r\nLocation: %s\r\nContent-Length: 0\r\n"
                     b"Connection: close\r\n\r\n" % target[len("/redirect?to="):].encode())
    else:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
    await writer.drain()
    writer.close()

async def main():
    server = await asyncio.start_server(serve, sys.argv[1], 443, ssl=context)
    print("READY", flush=True)
    async with server:
        await server.serve_forever()

asyncio.run(main())
"""


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def make_certificates(folder: Path, names: list[str]) -> tuple[Path, Path, Path]:
    """A test CA, and a server certificate for `names` signed by it: (ca, cert, key)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("Cellmate test data API CA"))
        .issuer_name(_name("Cellmate test data API CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(names[0]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    paths = folder / "api-ca.pem", folder / "api-cert.pem", folder / "api-key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return paths


@dataclass
class Api:
    address: str
    ca: Path
    """The API's CA certificate (PEM): what the proxy verifies the API with."""
    seen: list[dict[str, Any]] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def wait_for(self, count: int) -> list[dict[str, Any]]:
        """The requests seen once there are `count` of them (within a deadline)."""
        async with asyncio.timeout(WAIT_S):
            while len(self.seen) < count:
                self.arrived.clear()
                await self.arrived.wait()
        return self.seen


@asynccontextmanager
async def serving_api(space: Namespace, folder: Path, names: list[str]) -> AsyncIterator[Api]:
    """The API on port 443 of `space`'s address, for `names`, until the end."""
    ca, cert, key = make_certificates(folder, names)
    api = Api(space.address, ca)
    args = [space.address, str(cert), str(key)]
    async with recording_in(space, SERVER, args, api.seen, api.arrived) as first:
        assert first.strip() == b"READY", first
        yield api
