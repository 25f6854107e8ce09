"""The one network a sandbox may join: its instance's sandbox network (allowlist mode).

With `--allow-egress-network` the proxy lets the executor make that network, exactly as
`executor.egress.network_spec` describes it (internal, no traffic between containers, its
bridge named for the instance, the proxy's labels), list it, inspect it and remove it; and a
sandbox may join it and no other. The environment that points the sandbox at the egress
proxy is rebuilt here from the network the engine shows (its gateway) and the proxy's port,
so a client can neither point a sandbox elsewhere nor give a sandbox without that network
the proxy's variables. Without the option, every network request is refused.
"""

from __future__ import annotations

from typing import Any

from dockerproxy import jsonbody as j
from dockerproxy.errors import RequestRefused
from dockerproxy.policy import Policy
from executor.egress import (
    PACKAGES_DIR,
    NetworkInfo,
    check_index_url,
    network_name,
    network_spec,
    read_network,
    sandbox_environment,
)

EGRESS_ENV = frozenset(sandbox_environment(("0.0.0.0", 1), "http://index"))  # noqa: S104
"""The variables that only a sandbox on the sandbox network may have (their names)."""
NO_EGRESS = (
    "the operator allows no sandbox network (start the proxy with --allow-egress-network for "
    "CELLMATE_NETWORK=allowlist)"
)


def expected(policy: Policy) -> dict[str, Any]:
    """The instance's sandbox network, as the engine's create body spells it."""
    spec = network_spec(policy.instance, policy.labels)
    return {
        "Name": spec["name"],
        "Driver": spec["driver"],
        "Internal": True,
        "Attachable": False,
        "EnableIPv6": False,
        "CheckDuplicate": True,
        "Options": spec["options"],
        "Labels": spec["labels"],
    }


def create_body(struct: j.Struct, policy: Policy) -> dict[str, Any]:
    """The body for POST /networks/create: the instance's sandbox network, nothing else."""
    if not policy.egress_network:
        raise RequestRefused(NO_EGRESS)
    wanted = expected(policy)
    name = struct.take("Name")
    if name != wanted["Name"]:
        raise RequestRefused(
            f"the only network this proxy makes is its instance's sandbox network "
            f"{wanted['Name']}, not {name!r}"
        )
    given = {
        "Driver": struct.take("Driver") or "bridge",
        "Internal": j.boolean(struct.take("Internal"), "Internal", False),
        "Attachable": j.boolean(struct.take("Attachable"), "Attachable", False),
        "EnableIPv6": j.boolean(struct.take("EnableIPv6"), "EnableIPv6", False),
        "Options": j.string_map(struct.take("Options"), "Options"),
        "Labels": j.string_map(struct.take("Labels"), "Labels"),
    }
    j.boolean(struct.take("CheckDuplicate"), "CheckDuplicate", True)
    # Addresses are the engine's choice from its pools; a client may not pick a range (one
    # that overlaps the host's own networks would route them into the sandboxes' bridge).
    for field in ("IPAM", "Ingress", "Scope", "ConfigOnly", "ConfigFrom"):
        j.absent(struct.take(field), field)
    struct.done()
    for field, value in given.items():
        if value != wanted[field]:
            raise RequestRefused(
                f"the sandbox network's {field} must be {wanted[field]!r}, not {value!r}"
            )
    return wanted


def check_network(found: dict[str, Any], policy: Policy) -> NetworkInfo:
    """The network a sandbox asks to join, as the engine shows it, if it is the instance's
    sandbox network with every property that keeps it a door (its labels are checked by the
    caller's lookup); RequestRefused otherwise."""
    if not policy.egress_network:
        raise RequestRefused(NO_EGRESS)
    wanted = expected(policy)
    shown = {
        "Name": found.get("Name"),
        "Driver": found.get("Driver"),
        "Internal": found.get("Internal"),
        "Attachable": found.get("Attachable"),
        "EnableIPv6": found.get("EnableIPv6"),
        "Options": found.get("Options") or {},
    }
    for field, value in shown.items():
        if value != wanted[field]:
            raise RequestRefused(
                f"network {found.get('Name')!r} is not this instance's sandbox network "
                f"({field} is {value!r}, not {wanted[field]!r})"
            )
    if found.get("ConfigFrom", {}).get("Network") or found.get("Ingress"):
        raise RequestRefused("the sandbox network may not take its configuration elsewhere")
    try:
        return read_network(found)
    except ValueError as exc:
        raise RequestRefused(str(exc)) from None


def egress_environment(given: dict[str, str], info: NetworkInfo, policy: Policy) -> list[str]:
    """The proxy's variables for a sandbox on `info`: exactly what the executor computes
    from the network's gateway and the proxy's port; the client chooses only the index."""
    index = given.get("PIP_INDEX_URL", "")
    try:
        check_index_url(index)
    except ValueError as exc:
        raise RequestRefused(str(exc)) from None
    wanted = sandbox_environment((info.gateway, policy.egress_proxy_port), index)
    if given != wanted:
        wrong = sorted(name for name in set(given) | set(wanted) if given.get(name) != wanted[name])
        raise RequestRefused(
            f"the sandbox network's variables {', '.join(wrong)} must point at the egress "
            f"proxy on {info.gateway}:{policy.egress_proxy_port}"
        )
    return [f"{name}={value}" for name, value in wanted.items()]


def packages_tmpfs(options: str, policy: Policy, size_mb: int) -> str:
    """The tmpfs where pip installs: exec allowed, owned by the sandbox user, capped."""
    allowed = {"rw", "nosuid", "nodev", "exec", "mode=0755"}
    for option in filter(None, options.split(",")):
        key = option.partition("=")[0]
        if key not in ("size", "uid", "gid") and option not in allowed:
            raise RequestRefused(f"the tmpfs option {option!r} is not allowed at {PACKAGES_DIR}")
    return f"rw,nosuid,nodev,exec,size={size_mb}m,uid={policy.uid},gid={policy.gid},mode=0755"


__all__ = ["EGRESS_ENV", "check_network", "create_body", "egress_environment", "network_name"]
