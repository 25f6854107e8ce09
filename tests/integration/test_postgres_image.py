"""The PostgreSQL image (`make build-postgres-image`) as the bot meets it: a container from
it makes its cluster on first start, takes the bot's connection and migrations, keeps the
data on its volume into a new container (whose own password setting it then ignores), and
refuses a wrong password and the superuser over TCP."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import docker
import docker.errors
import psycopg
import pytest
from docker.models.containers import Container

from bot.agent.history import MIGRATIONS
from bot.database import DatabaseError, Databases, migrate, open_store, version
from bot.ops.postgres_image import POSTGRES_REPOSITORY

pytestmark = pytest.mark.docker

IMAGE = f"{POSTGRES_REPOSITORY}:latest"
PASSWORD = "a-password with 'quotes' and spaces"  # noqa: S105 - the test's own secret
READY_S = 60.0


@dataclass
class Server:
    client: docker.DockerClient
    volume: str
    containers: list[Container]

    def run(
        self, environment: dict[str, str], files: Path | None = None, **options: Any
    ) -> Container:
        """A new container on the volume (with `files` at /run/secrets), port published
        on a free loopback port; `options` for the engine."""
        volumes = {self.volume: {"bind": "/var/lib/postgresql/data", "mode": "rw"}}
        if files is not None:
            volumes[str(files)] = {"bind": "/run/secrets", "mode": "ro"}
        # Host port None: the engine picks a free one.
        ports: dict[str, Any] = {"5432/tcp": ("127.0.0.1", None)}
        container: Container = self.client.containers.run(
            IMAGE,
            detach=True,
            name=f"cellmate-test-postgres-{uuid.uuid4().hex[:8]}",
            environment=environment,
            volumes=volumes,
            ports=ports,
            **options,
        )
        self.containers.append(container)
        return container

    def start(self, environment: dict[str, str], files: Path | None = None, **options: Any) -> str:
        """A new container on the volume, ready; its published address as host:port."""
        container = self.run(environment, files, **options)
        container.reload()
        port = container.attrs["NetworkSettings"]["Ports"]["5432/tcp"][0]["HostPort"]
        address = f"127.0.0.1:{port}"
        _wait_ready(container, address)
        return address

    def stop(self) -> None:
        for container in self.containers:
            container.stop(timeout=30)
            container.remove(v=True)
        self.containers.clear()


def _wait_ready(container: Container, address: str) -> None:
    deadline = time.monotonic() + READY_S
    while True:
        code, _ = container.exec_run(["pg_isready", "--quiet"])
        if code == 0:
            try:  # published too: the engine's proxy may lag the server by a moment
                url = f"postgresql://nobody:nothing@{address}/cellmate"
                psycopg.connect(url, connect_timeout=2).close()
            except psycopg.OperationalError as exc:
                if "password authentication failed" in str(exc):
                    return
        container.reload()
        if container.status != "running" or time.monotonic() > deadline:
            logs = container.logs().decode(errors="replace")[-3000:]
            pytest.fail(f"PostgreSQL did not become ready ({container.status}):\n{logs}")
        time.sleep(0.5)


@pytest.fixture
def server() -> Iterator[Server]:
    client = docker.from_env()
    try:
        client.images.get(IMAGE)
    except docker.errors.ImageNotFound:
        pytest.fail(f"{IMAGE} is missing: run `make build-postgres-image`")
    volume = client.volumes.create(f"cellmate-test-postgres-{uuid.uuid4().hex[:8]}")
    made = Server(client, volume.name, [])
    try:
        yield made
    finally:
        for container in made.containers:
            container.remove(force=True, v=True)
        volume.remove(force=True)
        client.close()


def _url(address: str, password: str = PASSWORD, user: str = "cellmate") -> str:
    return psycopg.conninfo.make_conninfo(
        f"postgresql://{address}/cellmate", user=user, password=password
    )


def test_the_bot_migrates_its_store_and_the_data_outlives_the_container(server: Server) -> None:
    address = server.start({"POSTGRES_PASSWORD": PASSWORD})
    where = Databases(f"postgresql://cellmate:{quote(PASSWORD, safe='')}@{address}/cellmate")
    db = open_store(where, MIGRATIONS)
    try:
        assert version(db, MIGRATIONS.store) == MIGRATIONS.latest
        with db.transaction() as session:
            session.execute("CREATE TABLE kept (note TEXT)")
            session.execute("INSERT INTO kept (note) VALUES (?)", ("before the restart",))
    finally:
        db.close()
        where.close()

    server.stop()  # container and its anonymous volumes gone; the named volume stays
    address = server.start({"POSTGRES_PASSWORD": "a different password, ignored"})
    where = Databases(f"postgresql://cellmate:{quote(PASSWORD, safe='')}@{address}/cellmate")
    db = where.open(MIGRATIONS.database)
    try:
        assert version(db, MIGRATIONS.store) == MIGRATIONS.latest
        assert migrate(db, MIGRATIONS) == 0
        assert db.execute("SELECT note FROM kept").rows == [("before the restart",)]
    finally:
        db.close()
        where.close()


def test_wrong_passwords_and_the_superuser_over_tcp_are_refused(server: Server) -> None:
    address = server.start({"POSTGRES_PASSWORD": PASSWORD})
    with pytest.raises(DatabaseError, match="password authentication failed"):
        Databases(f"postgresql://cellmate:wrong@{address}/cellmate").open("history")
    with pytest.raises(psycopg.OperationalError, match="rejects connection"):
        psycopg.connect(_url(address, user="postgres"), connect_timeout=5).close()
    with psycopg.connect(_url(address), connect_timeout=5) as connection:
        row = connection.execute("SELECT current_user, current_database()").fetchone()
        assert row == ("cellmate", "cellmate")
    # Inside the container the superuser comes in over the socket (peer): the password is
    # stored as a SCRAM verifier.
    stored = "SELECT rolpassword LIKE 'SCRAM-SHA-256$%' FROM pg_authid WHERE rolname = 'cellmate'"
    code, output = server.containers[-1].exec_run(["psql", "-U", "postgres", "-tAc", stored])
    assert code == 0
    assert output == b"t\n"


def test_the_password_from_a_mounted_file(server: Server, tmp_path: Path) -> None:
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "password").write_text(PASSWORD + "\n")
    secrets.chmod(0o755)
    (secrets / "password").chmod(0o644)
    address = server.start({"POSTGRES_PASSWORD_FILE": "/run/secrets/password"}, secrets)
    with psycopg.connect(_url(address), connect_timeout=5) as connection:
        assert connection.execute("SELECT 1").fetchone() == (1,)


def test_as_the_kubernetes_overlay_runs_it(server: Server, tmp_path: Path) -> None:
    """deploy/kubernetes/ha/postgres: read-only root with empty folders for the socket and
    /tmp, every capability dropped, no privilege escalation, the password from a file."""
    secrets = tmp_path / "secrets"
    secrets.mkdir(mode=0o755)
    (secrets / "password").write_text(PASSWORD)
    (secrets / "password").chmod(0o644)
    address = server.start(
        {"POSTGRES_PASSWORD_FILE": "/run/secrets/password"},
        secrets,
        read_only=True,
        tmpfs={"/var/run/postgresql": "uid=999,gid=999", "/tmp": ""},
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
    )
    with psycopg.connect(_url(address), connect_timeout=5) as connection:
        assert connection.execute("SELECT 1").fetchone() == (1,)


def test_a_new_cluster_without_a_password_does_not_start(server: Server) -> None:
    container = server.run({})
    assert container.wait(timeout=60)["StatusCode"] != 0
    assert b"needs a password" in container.logs()
