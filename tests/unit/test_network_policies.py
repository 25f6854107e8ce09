"""The NetworkPolicies of deploy/kubernetes, read as a network plugin that enforces them
(Calico, Cilium) reads them: who may open a connection to whom, on which port. The test
cluster has no such plugin, so this is where the policies' meaning is checked: allowlist
sandboxes reach the egress proxy's port and nothing else, other sandboxes nothing at all,
the control port only the bot, and the proxy public addresses only."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

MANIFESTS = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"


@dataclass(frozen=True)
class Pod:
    namespace: str
    labels: Mapping[str, str] = field(default_factory=dict)


Peer = Pod | str
"""A Pod, or an address outside the cluster's Pods."""

SANDBOX = Pod("cellmate-sandboxes", {"cellmate.sandbox": "1", "cellmate.instance": "prod"})
ALLOWLIST = Pod("cellmate-sandboxes", {**SANDBOX.labels, "cellmate.egress": "allowlist"})
PROXY = Pod("cellmate", {"app": "cellmate-egress"})
BOT = Pod("cellmate", {"app": "cellmate"})
DNS = Pod("kube-system", {"k8s-app": "kube-dns"})
STRANGER = Pod("default", {"app": "web"})
STRANGER_IN_CELLMATE = Pod("cellmate", {"app": "debug"})


def policies() -> list[dict[str, Any]]:
    found = []
    for path in sorted(MANIFESTS.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document and document.get("kind") == "NetworkPolicy":
                found.append(document)
    return found


def _selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    if selector is None:
        return True
    assert set(selector) <= {"matchLabels"}, selector  # what the shipped policies use
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def _peer_matches(peer: Mapping[str, Any], policy_namespace: str, other: Peer) -> bool:
    if "ipBlock" in peer:
        if isinstance(other, Pod):
            return False  # Pod addresses are private, and every block here excepts those
        block = peer["ipBlock"]
        address = ipaddress.ip_address(other)
        return address in ipaddress.ip_network(block["cidr"]) and not any(
            address in ipaddress.ip_network(cut) for cut in block.get("except", [])
        )
    if not isinstance(other, Pod):
        return False
    if "namespaceSelector" in peer:
        namespace_labels = {"kubernetes.io/metadata.name": other.namespace}
        if not _selects(peer["namespaceSelector"], namespace_labels):
            return False
    elif other.namespace != policy_namespace:
        return False
    return _selects(peer.get("podSelector"), other.labels)


def _allowed(pod: Pod, direction: str, other: Peer, port: int) -> bool:
    """Whether `pod`'s policies let it take (Ingress) or make (Egress) this connection."""
    chosen = [
        p
        for p in policies()
        if p["metadata"]["namespace"] == pod.namespace
        and direction in p["spec"].get("policyTypes", ["Ingress"])
        and _selects(p["spec"]["podSelector"] or None, pod.labels)
    ]
    if not chosen:
        return True  # no policy selects it: unrestricted
    key, peers_key = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
    for policy in chosen:
        for rule in policy["spec"].get(key, []):
            peers = rule.get(peers_key)
            ports = rule.get("ports")
            if peers and not any(
                _peer_matches(peer, policy["metadata"]["namespace"], other) for peer in peers
            ):
                continue
            if ports and not any(p.get("port") == port for p in ports):
                continue
            return True
    return False


def connects(source: Pod, target: Peer, port: int) -> bool:
    if not _allowed(source, "Egress", target, port):
        return False
    return not isinstance(target, Pod) or _allowed(target, "Ingress", source, port)


@pytest.mark.parametrize(
    ("source", "target", "port", "expected"),
    [
        (ALLOWLIST, PROXY, 3128, True),
        (ALLOWLIST, PROXY, 3129, False),  # the control port is the bot's
        (ALLOWLIST, BOT, 8080, False),
        (ALLOWLIST, SANDBOX, 8888, False),
        (ALLOWLIST, ALLOWLIST, 8888, False),
        (ALLOWLIST, DNS, 53, False),  # no names: the proxy resolves them
        (ALLOWLIST, "93.184.216.34", 443, False),  # the Internet, only through the proxy
        (ALLOWLIST, "10.96.0.1", 443, False),  # the Kubernetes API's Service
        (ALLOWLIST, "169.254.169.254", 80, False),  # cloud metadata
        (SANDBOX, PROXY, 3128, False),  # off mode: nothing at all
        (SANDBOX, "93.184.216.34", 443, False),
        (BOT, PROXY, 3129, True),
        (STRANGER, PROXY, 3128, False),
        (STRANGER, PROXY, 3129, False),
        (STRANGER_IN_CELLMATE, PROXY, 3129, False),
        (STRANGER, ALLOWLIST, 8888, False),
        (PROXY, "93.184.216.34", 443, True),
        (PROXY, "93.184.216.34", 8443, True),  # a port a grant names
        (PROXY, DNS, 53, True),
        *[
            (PROXY, private, 443, False)
            for private in (
                "10.0.0.5",
                "172.16.3.4",
                "192.168.1.1",
                "169.254.169.254",
                "127.0.0.1",
                "100.64.0.1",
                "0.0.0.0",  # noqa: S104 (an address the proxy may not reach)
            )
        ],
        (PROXY, BOT, 8080, False),
        (PROXY, ALLOWLIST, 8888, False),
    ],
)
def test_who_reaches_whom(source: Pod, target: Peer, port: int, expected: bool) -> None:
    assert connects(source, target, port) is expected


def test_every_shipped_policy_is_read_here() -> None:
    """The reading above covers what the manifests use: a policy with another kind of
    selector or peer would fail here rather than be misread."""
    names = {p["metadata"]["name"] for p in policies()}
    assert names == {"sandboxes-deny-all", "sandboxes-reach-the-egress-proxy", "egress-proxy"}
    for policy in policies():
        spec = policy["spec"]
        for rule in spec.get("ingress", []) + spec.get("egress", []):
            for peer in rule.get("from", []) + rule.get("to", []):
                assert set(peer) <= {"podSelector", "namespaceSelector", "ipBlock"}, peer
