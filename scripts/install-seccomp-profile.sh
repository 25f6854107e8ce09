#!/usr/bin/env bash
# Install the sandbox seccomp profile on a Kubernetes node: writes
# FOLDER/cellmate/sandbox.json, where FOLDER is the kubelet's seccomp folder
# (<kubelet --root-dir>/seccomp; default /var/lib/kubelet/seccomp). Sandbox Pods under runc
# name it as their Localhost profile (CELLMATE_KUBERNETES_SECCOMP_PROFILE). `-` prints the
# profile instead (for a ConfigMap that a DaemonSet copies onto every node).
# Usage: scripts/install-seccomp-profile.sh [FOLDER|-] [--arch x86_64|aarch64]
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
exec "$PYTHON" -m executor.kubernetes_seccomp "$@"
