"""The sandbox Pod as the cluster is asked for it: restricted, limited, labelled."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import pytest

from executor.kubernetes_backend import KubernetesSettings, pod_manifest
from executor.limits import SandboxLimits
from executor.protocol import SandboxBackend

LABELS = {"cellmate.sandbox": "1", "cellmate.instance": "prod"}


def _pod(limits: SandboxLimits | None = None, **settings: object) -> dict[str, object]:
    chosen = KubernetesSettings(**settings)  # type: ignore[arg-type]
    return pod_manifest(
        "cellmate-sandbox:abc", "cellmate-1", limits or SandboxLimits(), LABELS, chosen
    )


def test_the_pod_meets_the_restricted_level_and_holds_no_credentials() -> None:
    pod = _pod()
    spec = pod["spec"]
    assert isinstance(spec, dict)
    (container,) = spec["containers"]
    assert pod["metadata"] == {"name": "cellmate-1", "labels": LABELS}
    assert spec["automountServiceAccountToken"] is False
    assert spec["enableServiceLinks"] is False
    assert spec["restartPolicy"] == "Never"
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"]["seccompProfile"] == {
        "type": "Localhost",
        "localhostProfile": "cellmate/sandbox.json",
    }
    # The termination message's file (on the node's disk) is out of the sandbox user's reach.
    assert container["terminationMessagePath"] == "/root/termination-log"
    security = container["securityContext"]
    assert (security["runAsUser"], security["runAsGroup"]) == (61000, 61000)
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["privileged"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert {e["name"] for e in container["env"]} == {
        "OMP_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "MKL_NUM_THREADS",
        "CELLMATE_RUNNER_AWAIT_HELLO",
        "CELLMATE_FILE_SIZE_BYTES",
        "CELLMATE_PRELOAD",
    }
    assert (container["stdin"], container["tty"]) == (True, False)
    assert "runtimeClassName" not in spec  # runc: the cluster's default


def test_limits_become_requests_limits_and_sized_scratch_space() -> None:
    limits = SandboxLimits(memory_mb=2048, cpus=1.5, data_mb=300, tmp_mb=100, runtime="runsc")
    spec = _pod(limits, max_lifetime_s=600)["spec"]
    assert isinstance(spec, dict)
    resources = spec["containers"][0]["resources"]
    assert resources["limits"] == {"cpu": "1.5", "memory": "2048Mi"}
    assert resources["requests"] == {"cpu": "0.1", "memory": "256Mi"}
    guaranteed = _pod(limits, cpu_request=4.0, memory_request_mb=4096)["spec"]
    assert isinstance(guaranteed, dict)
    assert guaranteed["containers"][0]["resources"]["requests"] == resources["limits"]
    volumes = {v["name"]: v["emptyDir"] for v in spec["volumes"]}
    assert volumes == {
        "data": {"medium": "Memory", "sizeLimit": "300Mi"},
        "tmp": {"medium": "Memory", "sizeLimit": "100Mi"},
    }
    assert spec["runtimeClassName"] == "gvisor"
    assert spec["activeDeadlineSeconds"] == 600
    env = {e["name"]: e["value"] for e in spec["containers"][0]["env"]}
    assert env["CELLMATE_PRELOAD"] == "numpy,matplotlib"


def test_node_selectors_and_tolerations_are_parsed() -> None:
    spec = _pod(
        node_selector=("pool=sandboxes", "zone = a"),
        tolerations=("dedicated=sandbox:NoSchedule", "spot:NoExecute"),
    )["spec"]
    assert isinstance(spec, dict)
    assert spec["nodeSelector"] == {"pool": "sandboxes", "zone": "a"}
    assert spec["tolerations"] == [
        {"key": "dedicated", "operator": "Equal", "value": "sandbox", "effect": "NoSchedule"},
        {"key": "spot", "operator": "Exists", "effect": "NoExecute"},
    ]


def test_the_backend_is_chosen_by_a_setting() -> None:
    from bot.settings import load_settings
    from executor.kubernetes_backend import KubernetesBackend

    chosen = load_settings(
        {
            "CELLMATE_EXECUTOR_BACKEND": "kubernetes",
            "CELLMATE_KUBERNETES_NAMESPACE": "sbx",
            "CELLMATE_KUBERNETES_ALLOW_RUNC": "1",
        },
        env_file=None,
    )
    backend: SandboxBackend | None = chosen.sandbox_backend()
    assert isinstance(backend, KubernetesBackend)
    assert backend.namespace == "sbx"
    assert load_settings({}, env_file=None).sandbox_backend() is None  # Docker, the default


def test_scratch_space_on_the_nodes_disk_is_refused_with_the_reason() -> None:
    from bot.settings import SettingsError, load_settings

    with pytest.raises(SettingsError) as refused:
        load_settings({"CELLMATE_KUBERNETES_MEMORY_BACKED": "false"}, env_file=None)
    assert "CELLMATE_KUBERNETES_MEMORY_BACKED=false is not supported" in str(refused.value)
    assert "bounded only by eviction" in str(refused.value)


def test_runc_sandboxes_name_the_localhost_profile_and_gvisor_keeps_the_default() -> None:
    def profile(runtime: Literal["runc", "runsc"], **settings: object) -> object:
        spec = _pod(SandboxLimits(runtime=runtime), **settings)["spec"]
        assert isinstance(spec, dict)
        return spec["containers"][0]["securityContext"]["seccompProfile"]

    assert profile("runc", seccomp_profile="nodes/cellmate.json") == {
        "type": "Localhost",
        "localhostProfile": "nodes/cellmate.json",
    }
    assert profile("runsc") == {"type": "RuntimeDefault"}
    for opted_out in ("RuntimeDefault", "runtimedefault"):
        assert profile("runc", seccomp_profile=opted_out) == {"type": "RuntimeDefault"}


def test_the_localhost_profile_is_resolved_for_the_nodes_architecture(tmp_path: Path) -> None:
    from executor.kubernetes_seccomp import install, localhost_profile, main

    for machine, native, own, foreign in (
        ("x86_64", "SCMP_ARCH_X86_64", "arch_prctl", "cacheflush"),
        ("amd64", "SCMP_ARCH_X86_64", "arch_prctl", "cacheflush"),
        ("aarch64", "SCMP_ARCH_AARCH64", "cacheflush", "arch_prctl"),
    ):
        resolved = localhost_profile(machine)
        # The OCI format the container runtime reads: no Docker-only fields anywhere.
        assert set(resolved) == {"defaultAction", "defaultErrnoRet", "architectures", "syscalls"}
        assert resolved["architectures"][0] == native
        assert resolved["defaultAction"] == "SCMP_ACT_ERRNO"
        names = {n for rule in resolved["syscalls"] for n in rule["names"]}
        assert own in names
        assert foreign not in names
        for rule in resolved["syscalls"]:
            assert set(rule) <= {"names", "action", "errnoRet", "args"}
            if rule["action"] == "SCMP_ACT_ALLOW":
                assert not {"io_uring_setup", "io_uring_enter", "io_uring_register"} & set(
                    rule["names"]
                )
                assert not {"userfaultfd", "perf_event_open", "bpf", "ptrace"} & set(rule["names"])
    with pytest.raises(ValueError, match="no seccomp profile for 's390x'"):
        localhost_profile("s390x")
    written = install(tmp_path / "seccomp", "x86_64")
    assert written == tmp_path / "seccomp" / "cellmate" / "sandbox.json"
    assert json.loads(written.read_text()) == localhost_profile("x86_64")
    assert oct(written.stat().st_mode & 0o777) == "0o644"
    assert main([str(tmp_path / "other"), "--arch", "aarch64"]) == 0
    assert (tmp_path / "other" / "cellmate" / "sandbox.json").exists()
    assert main([str(tmp_path / "bad"), "--arch", "mips"]) == 1
