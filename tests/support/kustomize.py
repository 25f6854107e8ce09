"""A small kustomize for the tests, which must not need kubectl: it renders the
kustomizations of deploy/kubernetes as `kubectl kustomize` does, for the little they use.

Supported: `resources` (files, and directories with a kustomization), `components`
(directories whose kustomization is a Component), and `patches` by `path` holding a
strategic merge patch that is either `$patch: delete` of one object or a merge of mappings
only (no lists). Anything else raises Unsupported rather than being misread."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

Manifest = dict[str, Any]
KEYS = {"apiVersion", "kind", "resources", "components", "patches"}


class Unsupported(ValueError):
    pass


def documents(path: Path) -> list[Manifest]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def render(directory: Path) -> list[Manifest]:
    """The objects the kustomization in `directory` makes."""
    return _build(directory, "Kustomization", [])


def key(manifest: Manifest) -> tuple[str, str, str, str]:
    metadata = manifest["metadata"]
    return (
        manifest["apiVersion"],
        manifest["kind"],
        metadata.get("namespace", ""),
        metadata["name"],
    )


def _build(directory: Path, kind: str, accumulated: list[Manifest]) -> list[Manifest]:
    spec = yaml.safe_load((directory / "kustomization.yaml").read_text())
    if spec.get("kind", "Kustomization") != kind:
        raise Unsupported(f"{directory} is a {spec.get('kind')}, not a {kind}")
    if unknown := set(spec) - KEYS:
        raise Unsupported(f"{directory}/kustomization.yaml uses {sorted(unknown)}")
    objects = list(accumulated)
    for entry in spec.get("resources", []):
        path = (directory / entry).resolve()
        objects += render(path) if path.is_dir() else documents(path)
    for entry in spec.get("components", []):
        objects = _build((directory / entry).resolve(), "Component", objects)
    for patch in spec.get("patches", []):
        if set(patch) != {"path"}:
            raise Unsupported(f"{directory}: only patches by path are read here: {patch}")
        for document in documents(directory / patch["path"]):
            objects = _apply(objects, document)
    _unique(objects)
    return objects


def _apply(objects: list[Manifest], patch: Manifest) -> list[Manifest]:
    target = key(patch)
    matching = [o for o in objects if key(o) == target]
    if len(matching) != 1:
        raise Unsupported(f"the patch for {target} matches {len(matching)} objects")
    if patch.get("$patch") == "delete":
        return [o for o in objects if key(o) != target]
    merged = _merge(copy.deepcopy(matching[0]), patch)
    return [merged if key(o) == target else o for o in objects]


def _merge(into: Any, patch: Any) -> Any:
    if isinstance(patch, list):
        raise Unsupported("patches of lists are not read here")
    if not isinstance(patch, dict) or not isinstance(into, dict):
        return copy.deepcopy(patch)
    for name, value in patch.items():
        if name.startswith("$"):
            raise Unsupported(f"directive {name} is not read here")
        into[name] = _merge(into.get(name), value) if value is not None else None
        if into[name] is None:
            del into[name]
    return into


def _unique(objects: list[Manifest]) -> None:
    seen: set[tuple[str, str, str, str]] = set()
    for manifest in objects:
        if key(manifest) in seen:
            raise Unsupported(f"{key(manifest)} is made twice")
        seen.add(key(manifest))
