"""The HA overlay (deploy/kubernetes/ha), rendered without a cluster or kubectl by
tests/support/kustomize.py, and where kubectl is installed compared with `kubectl
kustomize`: three bot replicas in a StatefulSet with one Discord shard and one sandbox label
each, a headless Service and a disruption budget, the shared database's URL from the Secret,
every Pod "restricted", and the bundled PostgreSQL reachable from the bot's Pods alone."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate import utils as schemas

from bot import settings as bot_settings
from bot.settings import load_settings
from tests.support.kustomize import Manifest, documents, key, render
from tests.unit import test_network_policies as network

KUBERNETES = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
HA = KUBERNETES / "ha"
POSTGRES = HA / "postgres"
NAMESPACE = "cellmate"


@pytest.fixture(scope="module")
def rendered() -> list[Manifest]:
    return render(HA)


def one(objects: list[Manifest], kind: str, name: str) -> Manifest:
    (found,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def bot_container(objects: list[Manifest]) -> Manifest:
    container: Manifest
    (container,) = one(objects, "StatefulSet", "cellmate")["spec"]["template"]["spec"]["containers"]
    return container


def env(container: Manifest) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def workloads(objects: list[Manifest]) -> Iterator[Manifest]:
    for manifest in objects:
        if manifest["kind"] in {"Deployment", "StatefulSet", "DaemonSet", "Job"}:
            yield manifest


def test_kubectl_kustomize_renders_the_same(rendered: list[Manifest]) -> None:
    """Where kubectl is installed; elsewhere the renderer alone stands (no skip)."""
    kubectl = shutil.which("kubectl")
    for directory, ours in ((HA, rendered), (KUBERNETES, render(KUBERNETES))):
        if kubectl is None:
            assert ours
            continue
        result = subprocess.run(
            [kubectl, "kustomize", str(directory)],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        theirs = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
        assert {key(o): o for o in ours} == {key(o): o for o in theirs}


def test_the_base_stays_one_replica_without_the_overlay() -> None:
    base = render(KUBERNETES)
    deployment = one(base, "Deployment", "cellmate")
    assert deployment["spec"]["replicas"] == 1
    assert not [o for o in base if o["kind"] == "StatefulSet"]


def test_three_replicas_in_a_statefulset(rendered: list[Manifest]) -> None:
    assert not [o for o in rendered if o["kind"] == "Deployment" and key(o)[3] == "cellmate"]
    bot = one(rendered, "StatefulSet", "cellmate")
    spec = bot["spec"]
    assert bot["metadata"]["namespace"] == NAMESPACE
    assert spec["replicas"] == 3
    assert spec["podManagementPolicy"] == "Parallel"
    assert spec["updateStrategy"]["type"] == "RollingUpdate"
    labels = spec["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= labels.items()

    service = one(rendered, "Service", spec["serviceName"])
    assert service["metadata"]["name"] == "cellmate"
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"].items() <= labels.items()
    assert service["spec"]["ports"] == [{"name": "http", "port": 8080, "targetPort": "http"}]
    ports = {p["name"]: p["containerPort"] for p in bot_container(rendered)["ports"]}
    assert ports["http"] == 8080


def test_the_disruption_budget_takes_one_bot_replica_at_a_time(
    rendered: list[Manifest],
) -> None:
    budget = one(rendered, "PodDisruptionBudget", "cellmate")
    assert budget["spec"]["maxUnavailable"] == 1
    selector = budget["spec"]["selector"]["matchLabels"]
    selected = [
        w["metadata"]["name"]
        for w in workloads(rendered)
        if selector.items() <= w["spec"]["template"]["metadata"]["labels"].items()
    ]
    assert selected == ["cellmate"]


def test_ready_when_healthz_is_and_the_database_url_comes_from_the_secret(
    rendered: list[Manifest],
) -> None:
    container = bot_container(rendered)
    probe = container["readinessProbe"]["httpGet"]
    assert (probe["path"], probe["port"]) == ("/healthz", "http")
    url = env(container)["CELLMATE_DATABASE_URL"]
    assert url == {
        "secretKeyRef": {"name": "cellmate-secrets", "key": "CELLMATE_DATABASE_URL"}
    }  # not optional: no replica starts on SQLite files of its own


@pytest.mark.parametrize("discord", [True, False], ids=["discord", "slack-only"])
def test_one_discord_shard_and_one_sandbox_label_per_replica(
    rendered: list[Manifest], discord: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    bot = one(rendered, "StatefulSet", "cellmate")
    replicas = bot["spec"]["replicas"]
    values = {k: v for k, v in env(bot_container(rendered)).items() if isinstance(v, str)}
    assert values["CELLMATE_DISCORD_SHARD_COUNT"] == str(replicas)
    assert values["CELLMATE_DISCORD_SHARD_ID"] == "auto"
    assert "CELLMATE_INSTANCE" not in values  # one instance name; replicas differ by ordinal
    secrets = {"CELLMATE_DATABASE_URL": "postgresql://cellmate:x@cellmate-postgres/cellmate"}
    if discord:
        secrets["DISCORD_TOKEN"] = "x"  # noqa: S105 - a stand-in, never sent
    labels = set()
    for ordinal in range(replicas):
        # A StatefulSet's Pods are named <name>-<ordinal>, which is their host name.
        monkeypatch.setattr(bot_settings.socket, "gethostname", lambda o=ordinal: f"cellmate-{o}")
        settings = load_settings({**values, **secrets}, env_file=None)
        if discord:
            assert settings.discord.shard() == ordinal
        labels.add(settings.sandbox_instance)
    kind = "shard" if discord else "replica"
    assert labels == {f"default-{kind}{ordinal}" for ordinal in range(replicas)}


def test_the_pod_template_is_the_bases_with_the_ha_settings(rendered: list[Manifest]) -> None:
    """bot.yaml repeats the base's template: what differs is exactly what HA adds."""
    base = one(documents(KUBERNETES / "base" / "bot.yaml"), "Deployment", "cellmate")
    ours = one(rendered, "StatefulSet", "cellmate")["spec"]["template"]
    theirs = base["spec"]["template"]
    added = {"CELLMATE_DATABASE_URL", "CELLMATE_DISCORD_SHARD_COUNT", "CELLMATE_DISCORD_SHARD_ID"}
    (container,) = ours["spec"]["containers"]
    stripped = {
        **container,
        "env": [e for e in container["env"] if e["name"] not in added],
    }
    assert stripped == theirs["spec"]["containers"][0]
    assert {k: v for k, v in ours["spec"].items() if k not in {"affinity", "containers"}} == {
        k: v for k, v in theirs["spec"].items() if k != "containers"
    }
    assert ours["metadata"] == theirs["metadata"]


def _restricted_problems(workload: Manifest) -> list[str]:
    """What PodSecurity's `restricted` level refuses in a Pod template (the checks that
    apply to what these manifests could hold)."""
    pod = workload["spec"]["template"]["spec"]
    found = [f"{name}" for name in ("hostNetwork", "hostPID", "hostIPC") if pod.get(name)]
    allowed_volumes = {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
    for volume in pod.get("volumes", []):
        if not set(volume) - {"name"} <= allowed_volumes:
            found.append(f"volume {volume['name']}")
    pod_context = pod.get("securityContext", {})
    for container in pod["containers"] + pod.get("initContainers", []):
        context = container.get("securityContext", {})
        name = container["name"]
        if context.get("privileged"):
            found.append(f"{name}: privileged")
        if context.get("allowPrivilegeEscalation") is not False:
            found.append(f"{name}: allowPrivilegeEscalation")
        capabilities = context.get("capabilities", {})
        if "ALL" not in capabilities.get("drop", []):
            found.append(f"{name}: capabilities not dropped")
        if not set(capabilities.get("add", [])) <= {"NET_BIND_SERVICE"}:
            found.append(f"{name}: capabilities added")
        if not context.get("runAsNonRoot", pod_context.get("runAsNonRoot")):
            found.append(f"{name}: runAsNonRoot")
        if context.get("runAsUser", pod_context.get("runAsUser")) == 0:
            found.append(f"{name}: runAsUser 0")
        seccomp = context.get("seccompProfile", pod_context.get("seccompProfile", {}))
        if seccomp.get("type") not in {"RuntimeDefault", "Localhost"}:
            found.append(f"{name}: seccomp")
        if any("hostPort" in port for port in container.get("ports", [])):
            found.append(f"{name}: hostPort")
    return found


def test_every_pod_is_restricted(rendered: list[Manifest]) -> None:
    names = set()
    for workload in workloads(rendered):
        names.add(workload["metadata"]["name"])
        assert _restricted_problems(workload) == [], workload["metadata"]["name"]
    assert names == {"cellmate", "cellmate-egress", "cellmate-postgres"}
    namespace = one(rendered, "Namespace", NAMESPACE)
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_the_checker_sees_what_restricted_refuses(rendered: list[Manifest]) -> None:
    bot = one(rendered, "StatefulSet", "cellmate")
    bot = yaml.safe_load(yaml.safe_dump(bot))
    pod = bot["spec"]["template"]["spec"]
    del pod["securityContext"]["seccompProfile"]
    pod["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True
    pod["volumes"].append({"name": "host", "hostPath": {"path": "/"}})
    assert _restricted_problems(bot) == [
        "volume host",
        "bot: allowPrivilegeEscalation",
        "bot: seccomp",
    ]


def test_the_bundled_postgres(rendered: list[Manifest]) -> None:
    database = one(rendered, "StatefulSet", "cellmate-postgres")
    spec = database["spec"]
    assert spec["replicas"] == 1
    (container,) = spec["template"]["spec"]["containers"]
    assert container["image"].startswith("cellmate-postgres:")
    assert container["imagePullPolicy"] == "IfNotPresent"
    (claim,) = spec["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "5Gi"
    assert "storageClassName" not in claim["spec"]  # the cluster's default
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts[claim["metadata"]["name"]] == "/var/lib/postgresql/data"
    password = env(container)["POSTGRES_PASSWORD_FILE"]
    (secret,) = [v for v in spec["template"]["spec"]["volumes"] if "secret" in v]
    assert secret["secret"]["secretName"] == "cellmate-postgres"
    assert password == f"{mounts[secret['name']]}/password"
    assert container["readinessProbe"]["exec"]["command"][0] == "pg_isready"
    service = one(rendered, "Service", "cellmate-postgres")
    assert service["spec"]["selector"].items() <= spec["template"]["metadata"]["labels"].items()
    assert [p["port"] for p in service["spec"]["ports"]] == [5432]


def test_postgres_is_a_component_the_overlay_can_leave_out(rendered: list[Manifest]) -> None:
    component = yaml.safe_load((POSTGRES / "kustomization.yaml").read_text())
    assert component["kind"] == "Component"
    own = {key(o) for f in component["resources"] for o in documents(POSTGRES / f)}
    assert {k[1:] for k in own} == {
        ("StatefulSet", NAMESPACE, "cellmate-postgres"),
        ("Service", NAMESPACE, "cellmate-postgres"),
        ("NetworkPolicy", NAMESPACE, "cellmate-postgres"),
    }
    overlay = yaml.safe_load((HA / "kustomization.yaml").read_text())
    assert overlay["components"] == ["postgres"]
    assert own <= {key(o) for o in rendered}


def test_without_the_component_the_bot_uses_the_operators_database(
    rendered: list[Manifest], tmp_path: Path
) -> None:
    """The overlay with `components` removed, as an operator with a database of their own
    has it: everything but PostgreSQL's objects, the bot unchanged."""
    overlay = yaml.safe_load((HA / "kustomization.yaml").read_text())
    del overlay["components"]
    overlay["resources"] = [str((HA / entry).resolve()) for entry in overlay["resources"]]
    overlay["patches"] = [{"path": p["path"]} for p in overlay["patches"]]
    for patch in overlay["patches"]:
        shutil.copy(HA / patch["path"], tmp_path / patch["path"])
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
    alone = {key(o): o for o in render(tmp_path)}
    everything = {key(o): o for o in rendered}
    postgres = {k for k in everything if k[3] == "cellmate-postgres"}
    assert len(postgres) == 3
    assert alone == {k: o for k, o in everything.items() if k not in postgres}


def test_nothing_names_a_cluster(rendered: list[Manifest]) -> None:
    """No registry, no storage class: the overlay runs on any cluster with the images
    loaded."""
    text = yaml.safe_dump_all(rendered)
    assert "storageClassName" not in text
    for workload in workloads(rendered):
        for container in workload["spec"]["template"]["spec"]["containers"]:
            assert "/" not in container["image"], container["image"]


@pytest.fixture
def ha_policies(rendered: list[Manifest], monkeypatch: pytest.MonkeyPatch) -> None:
    """test_network_policies' reading, on the overlay's policies."""
    found = [o for o in rendered if o["kind"] == "NetworkPolicy"]
    monkeypatch.setattr(network, "policies", lambda: found)


def _pod(rendered: list[Manifest], name: str) -> network.Pod:
    workload = next(w for w in workloads(rendered) if w["metadata"]["name"] == name)
    labels = dict(workload["spec"]["template"]["metadata"]["labels"])
    return network.Pod(workload["metadata"]["namespace"], labels)


@pytest.mark.usefixtures("ha_policies")
def test_only_the_bots_pods_reach_postgres(rendered: list[Manifest]) -> None:
    bot = _pod(rendered, "cellmate")
    database = _pod(rendered, "cellmate-postgres")
    proxy = _pod(rendered, "cellmate-egress")
    assert network.connects(bot, database, 5432)
    assert not network.connects(bot, database, 22)
    for stranger in (
        network.SANDBOX,
        network.ALLOWLIST,
        network.STRANGER,
        network.STRANGER_IN_CELLMATE,
        network.Pod("cellmate-sandboxes", bot.labels),  # the bot's labels, elsewhere
        proxy,
    ):
        assert not network.connects(stranger, database, 5432), stranger
    for target in (bot, proxy, network.DNS, "93.184.216.34", "10.96.0.1"):
        assert not network.connects(database, target, 443), target
    # The base's rules hold for the StatefulSet's Pods as for the Deployment's.
    assert network.connects(bot, proxy, 3129)
    assert not network.connects(network.ALLOWLIST, bot, 8080)


def test_every_rendered_object_matches_the_api_schema(rendered: list[Manifest]) -> None:
    oldest, newest = schemas.all_versions()[0], schemas.latest_version()
    for manifest in rendered:
        for version in (oldest, newest):
            kubernetes_validate.validate(manifest, version, strict=True)
