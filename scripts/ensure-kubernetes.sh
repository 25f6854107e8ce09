#!/usr/bin/env bash
# A Kubernetes cluster for the Kubernetes backend's tests: start the single-node kit in
# KIT (default ../shared/k8s-kit beside the checkout) in its own network namespace, copy the
# sandbox image (already built in Docker) onto its node, install the sandbox seccomp profile
# in its kubelet's seccomp folder, and print the admin kubeconfig's
# path as the last line. The kit never pulls (no registry): sandboxes use imagePullPolicy
# Never there.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "[cellmate] $*" >&2; }
KIT="${1:-${K8S_KIT:-../shared/k8s-kit}}"
if [ ! -x "$KIT/up" ]; then
  log "No Kubernetes kit at $KIT (its 'up' script is missing)."
  exit 1
fi
TAG="$(.venv/bin/python -c 'from executor.image import default_tag; print(default_tag())')"
log "Starting the test cluster from $KIT (its own network namespace) ..."
KUBECONFIG_LINE="$("$KIT/up" | tail -1)"
KUBECONFIG_PATH="${KUBECONFIG_LINE#export KUBECONFIG=}"
if [ ! -f "$KUBECONFIG_PATH" ]; then
  log "The kit did not print a kubeconfig (last line: $KUBECONFIG_LINE)."
  exit 1
fi
log "Loading $TAG onto the cluster's node ..."
# A containerd that has just started (or an engine busy building beside it) can fail an
# import at once; the kit's own check says so, and a second try finds them both ready.
for attempt in 1 2 3; do
  if "$KIT/load-image" "$TAG" >&2; then
    break
  fi
  if [ "$attempt" = 3 ]; then
    log "Could not load $TAG onto the cluster's node (3 tries)."
    exit 1
  fi
  log "Loading $TAG failed (try $attempt of 3); trying again in $((attempt * 5)) s ..."
  sleep $((attempt * 5))
done
# The kit's kubelet runs with --root-dir=<state>/data/kubelet, beside the kubeconfig: its
# seccomp folder, where runc sandboxes find their Localhost profile, is under it.
SECCOMP_DIR="$(dirname "$KUBECONFIG_PATH")/data/kubelet/seccomp"
log "Installing the sandbox seccomp profile in $SECCOMP_DIR ..."
scripts/install-seccomp-profile.sh "$SECCOMP_DIR" >&2
log "Cluster ready: KUBECONFIG=$KUBECONFIG_PATH"
echo "$KUBECONFIG_PATH"
