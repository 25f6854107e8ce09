"""`cellmate doctor` says whether the engine can checkpoint gVisor sandboxes, and so whether
idle sessions pause to memory snapshots or keep only their workspace."""

from __future__ import annotations

from bot.ops.doctor import snapshots_finding
from bot.settings import load_settings

RUNTIMES = {"runc": {}, "runsc": {}}


def test_an_experimental_engine_with_gvisor_pauses_idle_sessions() -> None:
    settings = load_settings({"CELLMATE_SANDBOX_RUNTIME": "runsc"}, env_file=None)
    found = snapshots_finding(settings, {"ExperimentalBuild": True, "Runtimes": RUNTIMES})
    assert found.ok
    assert found.detail == (
        "the engine can checkpoint: a session idle 300 s is paused to a memory snapshot, "
        "and cold sandboxes are clones of a warmed template"
    )


def test_without_experimental_features_the_doctor_says_how_to_turn_them_on() -> None:
    settings = load_settings({"CELLMATE_SANDBOX_RUNTIME": "runsc"}, env_file=None)
    found = snapshots_finding(settings, {"ExperimentalBuild": False, "Runtimes": RUNTIMES})
    assert not found.ok
    assert not found.required
    assert "offers no checkpoints here" in found.detail
    assert '"experimental": true' in found.fix


def test_under_runc_sessions_keep_their_workspace() -> None:
    settings = load_settings({"CELLMATE_SANDBOX_RUNTIME": "runc"}, env_file=None)
    found = snapshots_finding(settings, {"ExperimentalBuild": True, "Runtimes": RUNTIMES})
    assert not found.ok
    assert found.detail.startswith("idle sessions keep their workspace only")
    assert "runc" in found.detail


def test_pausing_turned_off_is_said() -> None:
    settings = load_settings(
        {
            "CELLMATE_SANDBOX_RUNTIME": "runsc",
            "CELLMATE_SESSION_PAUSE_AFTER_S": "0",
            "CELLMATE_POOL_TEMPLATE": "true",
        },
        env_file=None,
    )
    found = snapshots_finding(settings, {"ExperimentalBuild": True, "Runtimes": RUNTIMES})
    assert found.ok
    assert "pausing is off" in found.detail


def test_only_the_docker_backend_takes_snapshots() -> None:
    """Kubernetes' runtime interface offers no checkpoint here: its sessions keep the
    workspace path (the session manager checks for the protocol)."""
    from executor.docker_backend import DockerBackend
    from executor.kubernetes_backend import KubernetesBackend
    from executor.protocol import SnapshotKeeper

    assert all(hasattr(DockerBackend, name) for name in ("pause", "resume", "remove_paused"))
    assert not any(hasattr(KubernetesBackend, name) for name in ("pause", "resume"))
    assert issubclass(DockerBackend, SnapshotKeeper)
    assert not issubclass(KubernetesBackend, SnapshotKeeper)
