"""The sandbox's seccomp profile as a Kubernetes node reads it: a `Localhost` profile.

A Pod names a file under the kubelet's seccomp folder (`<root-dir>/seccomp`, by default
/var/lib/kubelet/seccomp); the container runtime reads it as the OCI runtime spec's
`LinuxSeccomp`, which has no `archMap` and no `includes`/`excludes` (an unknown field is
dropped, so a rule meant for one architecture would apply on every one). The profile of
executor/seccomp.py is therefore resolved here for one node architecture: its
architectures, and only the rules that hold for it with no capabilities.

`python -m executor.kubernetes_seccomp [--arch ARCH] DIR` writes DIR/cellmate/sandbox.json
(`-` prints it); scripts/install-seccomp-profile.sh does the same on a node.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

from executor.seccomp import profile

PROFILE_PATH = "cellmate/sandbox.json"
"""The profile's path under the kubelet's seccomp folder, as a Pod names it."""
KUBELET_SECCOMP_DIR = "/var/lib/kubelet/seccomp"
ARCHES = {
    "x86_64": ("SCMP_ARCH_X86_64", {"amd64", "x32", "x86"}),
    "aarch64": ("SCMP_ARCH_AARCH64", {"arm64", "arm"}),
}
"""A machine (uname -m) and its seccomp architecture and Docker's names for its ABIs."""
ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}


def localhost_profile(machine: str = "") -> dict[str, Any]:
    """The profile for a node of `machine` (default: this one's), in the OCI format."""
    machine = ALIASES.get(machine, machine) or platform.machine()
    if machine not in ARCHES:
        raise ValueError(f"no seccomp profile for {machine!r} (known: {', '.join(ARCHES)})")
    native, abis = ARCHES[machine]
    source = profile()
    architectures = [native]
    for entry in source.get("archMap", []):
        if entry.get("architecture") == native:
            architectures += entry.get("subArchitectures", [])
    rules = [_rule(rule) for rule in source["syscalls"] if _applies(rule, abis)]
    resolved: dict[str, Any] = {
        "defaultAction": source["defaultAction"],
        "architectures": architectures,
        "syscalls": rules,
    }
    if "defaultErrnoRet" in source:
        resolved["defaultErrnoRet"] = source["defaultErrnoRet"]
    return resolved


def _applies(rule: dict[str, Any], abis: set[str]) -> bool:
    includes, excludes = rule.get("includes") or {}, rule.get("excludes") or {}
    if includes.get("caps") or includes.get("minKernel"):
        return False  # sandboxes have no capabilities; an unknown kernel gets the refusal
    if includes.get("arches") and not abis & set(includes["arches"]):
        return False
    return not (excludes.get("arches") and abis & set(excludes["arches"]))


def _rule(rule: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in rule.items() if k in ("names", "action", "errnoRet", "args")}


def profile_text(machine: str = "") -> str:
    return json.dumps(localhost_profile(machine), indent=1, sort_keys=True) + "\n"


def install(folder: Path, machine: str = "") -> Path:
    """Write the profile where a kubelet with seccomp folder `folder` finds it; atomic, so
    a Pod starting meanwhile reads the old file or the new one."""
    target = folder / PROFILE_PATH
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}")
    partial.write_text(profile_text(machine))
    partial.chmod(0o644)
    partial.replace(target)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m executor.kubernetes_seccomp",
        description=f"Write the sandbox seccomp profile as FOLDER/{PROFILE_PATH}.",
    )
    parser.add_argument(
        "folder",
        nargs="?",
        default=KUBELET_SECCOMP_DIR,
        help=f"the kubelet's seccomp folder (default {KUBELET_SECCOMP_DIR}); - prints it",
    )
    parser.add_argument("--arch", default="", help="the node's machine (default: this one's)")
    args = parser.parse_args(argv)
    try:
        if args.folder == "-":
            sys.stdout.write(profile_text(args.arch))
        else:
            print(install(Path(args.folder), args.arch))
    except (ValueError, OSError) as exc:
        print(f"cannot write the profile: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
