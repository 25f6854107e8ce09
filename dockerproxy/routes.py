"""Which requests the proxy serves, and the request it sends to the engine for each.

Only what the executor does is here: ping and version, the runtimes from /info, the sandbox
image, lists of the instance's sandboxes, creating sandbox containers and their tmpfs volumes,
and start, attach, archive, pause, kill, wait, inspect and remove on objects that carry the
sandbox label and the proxy's instance label; with `--allow-egress-network`, the instance's
sandbox network too (made, listed, inspected, removed; see networks.py). The query of each is
rebuilt from the parameters the executor uses; everything else is refused. Logs are never
served: a sandbox's output is its users' data and the protocol stream, and the engine keeps
none of it (log driver none).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from posixpath import normpath
from typing import Literal

from dockerproxy import networks
from dockerproxy.bodies import DATA_DIR, LABEL_KEY, LABEL_VALUE, NAME
from dockerproxy.errors import RequestRefused
from dockerproxy.policy import Policy
from dockerproxy.wire import Request

Kind = Literal["containers", "volumes", "networks"]
Body = Literal["none", "container", "volume", "network", "tar"]
OBJECT = re.compile(rf"/(?P<kind>containers|volumes)/(?P<name>{NAME.pattern})(?P<rest>/[a-z]+)?")
NETWORK = re.compile(rf"/networks/(?P<name>{NAME.pattern})")
IMAGE = re.compile(r"/images/(?P<name>[^/]+)/json")
SIGNALS = {"KILL", "SIGKILL", "9", "TERM", "SIGTERM", "15", "INT", "SIGINT", "2"}
WAIT_CONDITIONS = {"not-running", "next-exit", "removed"}
TRUE = {"1", "true", "True"}
NO_LOGS = (
    "sandbox logs are not served: a sandbox's output is its users' data and the protocol "
    "stream (read it through attach)"
)
FALSE = {"0", "false", "False", ""}


@dataclass(slots=True)
class Plan:
    method: str
    path: str
    """The engine's path; `{id}` stands for the checked object's id."""
    query: dict[str, str] = field(default_factory=dict)
    body: Body = "none"
    target: tuple[Kind, str] | None = None
    """An object that must exist and carry the sandbox label and the proxy's instance label."""
    upgrade: bool = False
    info: bool = False


def plan(request: Request, policy: Policy) -> Plan:
    if request.version is not None and request.version < policy.min_api_version:
        wanted = ".".join(map(str, policy.min_api_version))
        raise RequestRefused(
            f"API versions before {wanted} are not served (they read bodies differently)"
        )
    method, path, query = request.method, request.path, request.query
    if path == "/_ping" and method in ("GET", "HEAD"):
        return _bodyless(request, Plan(method, path))
    if (method, path) == ("GET", "/version"):
        return _bodyless(request, Plan(method, path))
    if (method, path) == ("GET", "/info"):
        return _bodyless(request, Plan(method, path, info=True))
    if method == "GET" and (image := IMAGE.fullmatch(path)):
        if not image["name"].startswith(f"{policy.image_repository}:"):
            raise RequestRefused(
                f"only the sandbox image ({policy.image_repository}) can be inspected"
            )
        return _bodyless(request, Plan(method, path))
    if (method, path) == ("GET", "/containers/json"):
        # size and trunc_cmd only change what the answer shows; they are dropped.
        allowed = _params(query, {"all", "filters", "limit", "size", "trunc_cmd"})
        rebuilt = {"filters": _label_filter(allowed.get("filters"), policy)}
        if "all" in allowed:
            rebuilt["all"] = _flag(allowed["all"], "all")
        if "limit" in allowed and allowed["limit"] not in ("", "-1"):
            rebuilt["limit"] = str(int(allowed["limit"])) if allowed["limit"].isdigit() else "-1"
        return _bodyless(request, Plan(method, path, rebuilt))
    if (method, path) == ("GET", "/volumes"):
        allowed = _params(query, {"filters"})
        return _bodyless(
            request,
            Plan(method, path, {"filters": _label_filter(allowed.get("filters"), policy)}),
        )
    if (method, path) == ("POST", "/containers/create"):
        allowed = _params(query, {"name"})
        rebuilt = {}
        if allowed.get("name"):
            if not NAME.fullmatch(allowed["name"]):
                raise RequestRefused(f"the container name {allowed['name']!r} is not allowed")
            rebuilt["name"] = allowed["name"]
        return Plan(method, path, rebuilt, body="container")
    if path.startswith("/networks") and not policy.egress_network:
        raise RequestRefused(f"{method} {path}: {networks.NO_EGRESS}")
    if (method, path) == ("GET", "/networks"):
        allowed = _params(query, {"filters"})
        return _bodyless(
            request,
            Plan(method, path, {"filters": _label_filter(allowed.get("filters"), policy)}),
        )
    if (method, path) == ("POST", "/networks/create"):
        _params(query, set())
        return Plan(method, path, body="network")
    if network := NETWORK.fullmatch(path):
        if method not in ("GET", "DELETE"):
            raise RequestRefused(f"{method} {path} is not something the executor does")
        # Inspection's verbose and scope only add swarm details; they are not passed on.
        _params(query, {"verbose", "scope"} if method == "GET" else set())
        return _bodyless(
            request, Plan(method, "/networks/{id}", target=("networks", network["name"]))
        )
    if (method, path) == ("POST", "/volumes/create"):
        _params(query, set())
        return Plan(method, path, body="volume")
    found = OBJECT.fullmatch(path)
    if found:
        kind: Kind = "containers" if found["kind"] == "containers" else "volumes"
        return _on_object(request, kind, found["name"], found["rest"] or "")
    raise RequestRefused(f"{method} {path} is not something the executor does")


def _on_object(request: Request, kind: Kind, name: str, rest: str) -> Plan:
    method, query = request.method, request.query
    target: tuple[Kind, str] = (kind, name)
    base = f"/{kind}/{{id}}"
    if kind == "volumes":
        if rest or method not in ("GET", "DELETE"):
            raise RequestRefused(f"{method} {request.path} is not something the executor does")
        rebuilt = _flags(_params(query, {"force"} if method == "DELETE" else set()))
        return _bodyless(request, Plan(method, base, rebuilt, target=target))
    action = (method, rest)
    if action == ("DELETE", ""):
        rebuilt = _flags(_params(query, {"force", "v", "link"}))
        if rebuilt.get("link") == "1":
            raise RequestRefused("removing links is not something the executor does")
        rebuilt.pop("link", None)
        return _bodyless(request, Plan(method, base, rebuilt, target=target))
    if action == ("GET", "/json"):
        _params(query, {"size"})
        return _bodyless(request, Plan(method, base + rest, target=target))
    if action in (("POST", "/start"), ("POST", "/pause"), ("POST", "/unpause")):
        # A start request may not carry a HostConfig: the engine would still apply one.
        _params(query, set())
        return _bodyless(request, Plan(method, base + rest, target=target))
    if action == ("POST", "/kill"):
        allowed = _params(query, {"signal"})
        signal = allowed.get("signal", "KILL") or "KILL"
        if signal not in SIGNALS:
            raise RequestRefused(f"the signal {signal!r} is not one the executor sends")
        return _bodyless(request, Plan(method, base + rest, {"signal": signal}, target=target))
    if action == ("POST", "/wait"):
        allowed = _params(query, {"condition"})
        rebuilt = {}
        if allowed.get("condition"):
            if allowed["condition"] not in WAIT_CONDITIONS:
                raise RequestRefused(f"the wait condition {allowed['condition']!r} is not allowed")
            rebuilt["condition"] = allowed["condition"]
        return _bodyless(request, Plan(method, base + rest, rebuilt, target=target))
    if action == ("POST", "/attach"):
        rebuilt = _flags(_params(query, {"stdin", "stdout", "stderr", "stream", "logs"}))
        if rebuilt.pop("logs", "0") == "1":
            raise RequestRefused(NO_LOGS)
        return _bodyless(request, Plan(method, base + rest, rebuilt, target=target, upgrade=True))
    if action == ("GET", "/logs"):
        raise RequestRefused(NO_LOGS)
    if rest == "/archive" and method in ("GET", "HEAD", "PUT"):
        allowed = _params(query, {"path"})
        if method == "PUT":
            if allowed.get("path") != DATA_DIR:
                # The engine resolves a deeper path inside the container, where the sandbox's
                # own code may have made it a link; the folders of a tar are rebuilt instead.
                raise RequestRefused(f"files can be put only into {DATA_DIR} itself")
            return Plan(method, base + rest, {"path": DATA_DIR}, body="tar", target=target)
        where = _data_path(allowed.get("path", ""))
        return _bodyless(request, Plan(method, base + rest, {"path": where}, target=target))
    raise RequestRefused(f"{method} {request.path} is not something the executor does")


def _bodyless(request: Request, plan: Plan) -> Plan:
    if request.length:
        raise RequestRefused(f"{request.method} {request.path} carries no body")
    return plan


def _params(query: dict[str, str], allowed: set[str]) -> dict[str, str]:
    unknown = set(query) - allowed
    if unknown:
        raise RequestRefused(
            f"the query parameter {', '.join(sorted(unknown))} is not allowed here"
        )
    return dict(query)


def _flag(value: str, name: str) -> str:
    if value in TRUE:
        return "1"
    if value in FALSE:
        return "0"
    raise RequestRefused(f"the query parameter {name} must be 1 or 0")


def _flags(query: dict[str, str]) -> dict[str, str]:
    return {name: _flag(value, name) for name, value in query.items()}


def _data_path(path: str) -> str:
    if "\x00" in path or not (path == DATA_DIR or path.startswith(DATA_DIR + "/")):
        raise RequestRefused(f"files can be read and written only under {DATA_DIR}")
    if normpath(path) != path.rstrip("/") or ".." in path.split("/"):
        raise RequestRefused("the archive path must be a plain path under /mnt/data")
    return path


def _label_filter(raw: str | None, policy: Policy) -> str:
    """The filters of a list request, rebuilt: labels only, always with the sandbox label and
    the proxy's instance label, so that a list shows only this instance's sandboxes."""
    try:
        filters = json.loads(raw or "{}")
    except ValueError:
        raise RequestRefused("filters are not valid JSON") from None
    if not isinstance(filters, dict) or set(filters) - {"label"}:
        raise RequestRefused("lists may be filtered only by label")
    labels = filters.get("label") or []
    if isinstance(labels, dict):
        labels = [key for key, on in labels.items() if on is True]
    if not isinstance(labels, list):
        raise RequestRefused("the label filter must be a list")
    kept = [f"{key}={value}" for key, value in policy.labels.items()]
    for label in labels:
        key, equals, value = str(label).partition("=")
        if not LABEL_KEY.fullmatch(key) or not LABEL_VALUE.fullmatch(value):
            raise RequestRefused(f"the label filter {label!r} is not allowed")
        if key in policy.labels:
            if equals and value != policy.labels[key]:
                raise RequestRefused(
                    f"this proxy lists only its own sandboxes ({key}={policy.labels[key]}), "
                    f"not {label!r}"
                )
            continue
        if (entry := f"{key}={value}" if equals else key) not in kept:
            kept.append(entry)
    return json.dumps({"label": kept})
