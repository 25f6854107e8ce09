"""The sandbox image's other languages, in real containers under runc and gVisor: each
kernelspec is found system-wide, and each kernel starts as the sandbox user, with no
network, a read-only root and the sandbox's /tmp, and answers 1 + 1."""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass

import docker
import pytest

from executor import SandboxLimits, default_tag
from executor.docker_specs import sandbox_specs
from executor.image import image_languages
from executor.languages import KERNELSPECS, configured_languages

pytestmark = [pytest.mark.docker, pytest.mark.any_runtime]

PROBE = """
import json, sys, time
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import start_new_kernel

name, code = sys.argv[1], sys.argv[2]
specs = sorted(KernelSpecManager().find_kernel_specs())
started = time.monotonic()
manager, client = start_new_kernel(kernel_name=name, startup_timeout=120)
ready = time.monotonic()
out = []

def hook(msg):
    content, kind = msg["content"], msg["msg_type"]
    if kind == "stream":
        out.append(content["text"])
    elif kind in ("execute_result", "display_data"):
        out.append(content["data"].get("text/plain", ""))
    elif kind == "error":
        out.append(f"{content['ename']}: {content['evalue']}")

try:
    reply = client.execute_interactive(code, timeout=120, output_hook=hook)
    done = time.monotonic()
finally:
    client.stop_channels()
    manager.shutdown_kernel(now=True)
print(json.dumps({
    "specs": specs,
    "status": reply["content"]["status"],
    "output": "".join(out),
    "start_s": round(ready - started, 2),
    "execute_s": round(done - ready, 2),
}))
"""

ONE_PLUS_ONE = {
    "python3": "1 + 1",
    "r": "1 + 1",
    "javascript": "1 + 1",
    "typescript": "const two: number = 1 + 1; two",
    "bash": "echo $((1 + 1))",
}


@dataclass(frozen=True)
class Probe:
    specs: list[str]
    status: str
    output: str
    start_s: float
    execute_s: float


def kernel_probe(client: docker.DockerClient, runtime: str, kernel: str) -> Probe:
    """Run PROBE in a container made like a sandbox (its user, runtime, read-only root,
    noexec /tmp, no capabilities, seccomp profile, limits; no network), with a tmpfs at
    /mnt/data in place of the sandbox's volume; the container is always removed."""
    name = f"cellmate-langtest-{uuid.uuid4().hex[:12]}"
    limits = SandboxLimits(runtime=runtime)  # type: ignore[arg-type]
    _, spec = sandbox_specs(default_tag(), name, limits, {"cellmate.test": "language-kernels"})
    for key in ("mounts", "log_config", "stdin_open", "detach"):
        spec.pop(key)
    for variable in ("CELLMATE_PRELOAD", "CELLMATE_RUNNER_AWAIT_HELLO"):  # the runner's
        spec["environment"].pop(variable)
    spec["tmpfs"]["/mnt/data"] = f"rw,nosuid,nodev,size=64m,uid={limits.uid},gid={limits.gid}"
    container = client.containers.create(
        **spec,
        entrypoint=["/opt/venv/bin/python", "-c", PROBE],
        command=[kernel, ONE_PLUS_ONE[kernel]],
    )
    try:
        container.start()
        status = container.wait(timeout=240)
        stdout = container.logs(stdout=True, stderr=False).decode()
        stderr = container.logs(stdout=False, stderr=True).decode()
    finally:
        container.remove(force=True)
    assert status["StatusCode"] == 0, stderr[-2000:]
    return Probe(**json.loads(stdout.strip().splitlines()[-1]))


@pytest.fixture(scope="module")
def languages(docker_client: docker.DockerClient) -> tuple[str, ...]:
    return image_languages(docker_client, default_tag())


def test_the_image_label_names_the_configured_languages(languages: tuple[str, ...]) -> None:
    assert languages == configured_languages()


@pytest.mark.parametrize("kernel", ["r", "javascript", "typescript", "bash"])
def test_each_kernel_answers_one_plus_one(
    docker_client: docker.DockerClient, runtime: str, kernel: str, languages: tuple[str, ...]
) -> None:
    language = next(name for name, specs in KERNELSPECS.items() if kernel in specs)
    if language not in languages:
        pytest.skip(f"the image was built without {language} ({default_tag()})")
    result = kernel_probe(docker_client, runtime, kernel)
    expected = {"python3", *(spec for name in languages for spec in KERNELSPECS[name])}
    assert set(result.specs) == expected
    assert result.status == "ok", result
    assert re.fullmatch(r"(\[1\] )?2\s*", result.output), result


def set_id_files(client: docker.DockerClient, image: str) -> set[str]:
    """The setuid and setgid files of `image`'s file system."""
    output = client.containers.run(
        image,
        entrypoint=["find", "/", "-xdev", "(", "-perm", "-4000", "-o", "-perm", "-2000", ")"],
        command=["-type", "f"],
        user="0",
        network_disabled=True,
        remove=True,
    )
    return set(output.decode().split())


def test_the_languages_add_no_setuid_or_setgid_file(docker_client: docker.DockerClient) -> None:
    image = docker_client.images.get(default_tag())
    base = image.labels["org.opencontainers.image.base.name"]
    assert set_id_files(docker_client, default_tag()) <= set_id_files(docker_client, base)
