"""A throwaway PostgreSQL server from the Debian binaries, started and stopped by the tests.

Each pytest process (each xdist worker) starts its own, in a temporary directory, on a free
loopback port and a unix socket in that directory; each test then gets a database of its
own on it. initdb and the server refuse to run as root: as root they run as the `postgres`
user, who then owns the directory."""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

from bench.standins.ports import free_port

ENSURE = "scripts/ensure-postgres.sh"
DEBIAN = Path("/usr/lib/postgresql")
"""Debian's versions, each in <version>/bin (not on PATH by default)."""
SUPERUSER = "cellmate"
START_S = 60.0
STOP_S = 30.0


class PostgresMissing(RuntimeError):
    pass


def binaries() -> Path:
    """The directory with initdb, pg_ctl and postgres (PATH first, then Debian's)."""
    on_path = shutil.which("initdb")
    candidates = [Path(on_path).parent] if on_path else []
    versions = DEBIAN.glob("*/bin")
    candidates += sorted(versions, key=_version, reverse=True)
    for directory in candidates:
        if all((directory / name).exists() for name in ("initdb", "pg_ctl", "postgres")):
            return directory
    raise PostgresMissing(
        f"PostgreSQL's server binaries (initdb, pg_ctl, postgres) are missing: run {ENSURE}"
    )


def _version(directory: Path) -> int:
    name = directory.parent.name
    return int(name) if name.isdigit() else 0


class Postgres:
    def __init__(self) -> None:
        self.bin = binaries()
        self.password = secrets.token_hex(16)
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        # Not under pytest's tmp_path: its parents are private to root, and the server's
        # user must reach the directory.
        self.root = Path(tempfile.mkdtemp(prefix="cellmate-postgres-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self._as_user: list[str] = []
        if os.geteuid() == 0:
            try:
                user = pwd.getpwnam("postgres")
            except KeyError:
                self.root.rmdir()
                raise PostgresMissing(
                    f"no `postgres` user to run the server as (root may not): run {ENSURE}"
                ) from None
            os.chown(self.root, user.pw_uid, user.pw_gid)
            self._as_user = [
                "setpriv",
                f"--reuid={user.pw_uid}",
                f"--regid={user.pw_gid}",
                "--clear-groups",
                "--",
            ]

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}:{self.password}@127.0.0.1:{self.port}/{database}"

    def start(self) -> Postgres:
        try:
            secret = self.root / "password"
            secret.write_text(self.password)
            self._chown(secret)
            self._run(
                "initdb",
                "-D",
                str(self.data),
                f"--username={SUPERUSER}",
                f"--pwfile={secret}",
                "--auth=scram-sha-256",
                "--encoding=UTF8",
                "--no-instructions",
            )
            secret.unlink()
            # A port another process takes between free_port and the server's bind: another.
            for _ in range(5):
                if self._serve():
                    return self
            raise RuntimeError(f"PostgreSQL did not start:\n{self._log_tail()}")
        except BaseException:
            self.close()
            raise

    def _serve(self) -> bool:
        self.port = free_port()
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [
                    *self._as_user,
                    str(self.bin / "postgres"),
                    "-D",
                    str(self.data),
                    "-h",
                    "127.0.0.1",
                    "-p",
                    str(self.port),
                    "-k",
                    str(self.root),
                    # A test server: what a crash would lose is thrown away anyway.
                    "-c",
                    "fsync=off",
                    "-c",
                    "full_page_writes=off",
                    "-c",
                    "synchronous_commit=off",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.root,
            )
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.process = None
                return False
            try:
                psycopg.connect(self.url(), connect_timeout=2).close()
                return True
            except psycopg.OperationalError:
                time.sleep(0.05)
        raise RuntimeError(f"PostgreSQL did not answer within {START_S:g} s:\n{self._log_tail()}")

    def create_database(self) -> str:
        """A new empty database; its URL."""
        name = f"t_{secrets.token_hex(6)}"
        with psycopg.connect(self.url(), autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def drop_database(self, url: str) -> None:
        name = url.rsplit("/", 1)[1]
        with psycopg.connect(self.url(), autocommit=True) as admin:
            # FORCE: a connection a failed test left open must not keep the database.
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def close(self) -> None:
        try:
            if self.process is not None and self.process.poll() is None:
                with contextlib.suppress(subprocess.SubprocessError, OSError):
                    self._run(str(self.bin / "pg_ctl"), "stop", "-D", str(self.data), "-m", "fast")
                try:
                    self.process.wait(timeout=STOP_S)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def _run(self, program: str, *args: str) -> None:
        path = program if "/" in program else str(self.bin / program)
        done = subprocess.run(
            [*self._as_user, path, *args],
            capture_output=True,
            timeout=120,
            check=False,
            cwd=self.root,
        )
        if done.returncode != 0:
            output = (done.stdout + done.stderr).decode(errors="replace")
            raise RuntimeError(f"{Path(path).name} failed ({done.returncode}):\n{output}")

    def _chown(self, path: Path) -> None:
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(path, user.pw_uid, user.pw_gid)

    def _log_tail(self) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-20:])
        except OSError:
            return "(no log)"
