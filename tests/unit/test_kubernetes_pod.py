"""The sandbox Pod as the cluster is asked for it: restricted, limited, labelled."""

from __future__ import annotations

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
    spec = _pod(limits, memory_backed=False, max_lifetime_s=600)["spec"]
    assert isinstance(spec, dict)
    resources = spec["containers"][0]["resources"]
    assert resources["limits"] == {"cpu": "1.5", "memory": "2048Mi"}
    assert resources["requests"] == {"cpu": "0.1", "memory": "256Mi"}
    guaranteed = _pod(limits, cpu_request=4.0, memory_request_mb=4096)["spec"]
    assert isinstance(guaranteed, dict)
    assert guaranteed["containers"][0]["resources"]["requests"] == resources["limits"]
    volumes = {v["name"]: v["emptyDir"] for v in spec["volumes"]}
    assert volumes == {"data": {"sizeLimit": "300Mi"}, "tmp": {"sizeLimit": "100Mi"}}
    assert spec["runtimeClassName"] == "gvisor"
    assert spec["activeDeadlineSeconds"] == 600
    env = {e["name"]: e["value"] for e in spec["containers"][0]["env"]}
    assert env["CELLMATE_PRELOAD"] == "numpy,matplotlib"
    memory = _pod()["spec"]
    assert isinstance(memory, dict)
    assert memory["volumes"][0]["emptyDir"] == {"medium": "Memory", "sizeLimit": "512Mi"}


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
        {"CELLMATE_EXECUTOR_BACKEND": "kubernetes", "CELLMATE_KUBERNETES_NAMESPACE": "sbx"},
        env_file=None,
    )
    backend: SandboxBackend | None = chosen.sandbox_backend()
    assert isinstance(backend, KubernetesBackend)
    assert backend.namespace == "sbx"
    assert load_settings({}, env_file=None).sandbox_backend() is None  # Docker, the default
