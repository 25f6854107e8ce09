#!/usr/bin/env bash
# Make sure a Docker engine answers. An engine that already works is used as it is and never
# touched. Otherwise, on a Debian/Ubuntu machine where we are root, install Debian's docker.io
# and runsc (gVisor), register runsc as a runtime, start dockerd in the background and wait
# for it. Anywhere else, print what the operator has to install, and fail.
set -euo pipefail

log() { echo "[cellmate] $*" >&2; }
engine_answers() { timeout 10 docker info >/dev/null 2>&1; }

# gVisor's runtimes: `runsc` without any network (the default sandboxes have none), and
# `runsc-net`, which only sandboxes on the allowlist network use: their container's interface
# leads only to the egress proxy. It is --network=host: gVisor's socket calls go to the host
# kernel inside the container's own network namespace (the engine's routes and rules apply).
# gVisor's own stack (--network=sandbox) would keep the host's network code further away, but
# the pinned runsc refuses it on recent kernels ("cannot run with network enabled in root
# network namespace": its check for the root namespace misfires); with a runsc that accepts
# it, set CELLMATE_RUNSC_NETWORK=sandbox.
register_runtimes() {
  python3 - <<'PY'
import json, os, pathlib
path = pathlib.Path("/etc/docker/daemon.json")
config = json.loads(path.read_text()) if path.exists() and path.read_text().strip() else {}
runsc = os.environ.get("CELLMATE_RUNSC") or config.get("runtimes", {}).get("runsc", {}).get("path")
if not runsc:
    raise SystemExit("[cellmate] no runsc to register")
runtimes = config.setdefault("runtimes", {})
wanted = {
    "runsc": {"path": runsc, "runtimeArgs": ["--network=none"]},
    "runsc-net": {
        "path": runsc,
        "runtimeArgs": [f"--network={os.environ.get('CELLMATE_RUNSC_NETWORK') or 'host'}"],
    },
}
changed = [name for name, runtime in wanted.items() if runtimes.get(name) != runtime]
runtimes.update(wanted)
# Checkpoints (`docker checkpoint`, which pauses gVisor sessions to memory snapshots) are
# an experimental feature of the engine; an operator's explicit false is kept.
experimental = "experimental" not in config
config.setdefault("experimental", True)
if changed or experimental:
    path.write_text(json.dumps(config, indent=2) + "\n")
if changed:
    print(f"[cellmate] registered runtime(s) {', '.join(changed)} ({runsc}) in {path}")
if experimental:
    print(f"[cellmate] enabled the engine's experimental features (checkpoints) in {path}")
PY
}

if command -v docker >/dev/null 2>&1 && engine_answers; then
  # A working engine is used as it is, except that allowlist mode needs the networked gVisor
  # runtime: with CELLMATE_NETWORK=allowlist, a local engine of ours (root, runsc registered)
  # gets runsc-net, loaded with SIGHUP (the engine reloads its runtimes without a restart,
  # and running containers are not touched), and the host rules that keep the network to
  # the proxy's port.
  if [ "${CELLMATE_NETWORK:-off}" = allowlist ] && [ "$(id -u)" = 0 ] && [ -z "${DOCKER_HOST:-}" ] \
     && docker info --format '{{json .Runtimes}}' | grep -q '"runsc"'; then
    if ! docker info --format '{{json .Runtimes}}' | grep -q '"runsc-net"'; then
      register_runtimes
      pkill -HUP -x dockerd
      for _ in $(seq 1 30); do
        docker info --format '{{json .Runtimes}}' | grep -q '"runsc-net"' && break
        sleep 1
      done
      log "runtimes: $(docker info --format '{{range $k, $v := .Runtimes}}{{$k}} {{end}}')"
    fi
    "$(dirname "$0")/guard-sandbox-network.sh" add "${CELLMATE_NETWORK_PROXY_PORT:-3128}"
  fi
  exit 0
fi

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  log "No Docker engine answers (tried 'docker info'${DOCKER_HOST:+ with DOCKER_HOST=$DOCKER_HOST})."
  log "Install Docker (https://docs.docker.com/engine/install/) and start it, or point DOCKER_HOST"
  log "at a running engine; optionally install gVisor's runsc and register it as runtime 'runsc'."
  exit 1
fi

if [ -n "${DOCKER_HOST:-}" ]; then
  log "DOCKER_HOST=$DOCKER_HOST does not answer; fix that engine or unset DOCKER_HOST."
  exit 1
fi

if ! command -v dockerd >/dev/null 2>&1 || ! command -v runsc >/dev/null 2>&1; then
  log "No Docker engine answers: installing Debian's docker.io and runsc with apt-get ..."
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q docker.io runsc >/dev/null
  log "installed docker.io and runsc."
fi

# gVisor: Debian bookworm's runsc (2022) runs on the slow ptrace platform; the trixie build
# (2024, static, systrap platform) answers a kernel round trip about twice as fast. Its package
# is downloaded with a private apt configuration (nothing from trixie is installed) and checked
# against a pinned checksum; the binary goes to /usr/local/lib/cellmate. Where that fails, the
# runtime stays Debian's own runsc, and this says so.
RUNSC_DEB="runsc_0.0~20240729.0-4+b7_amd64.deb"
RUNSC_SHA256="3c25a5130dfac2f71237d5baad56ac86a255de87a0400f11b36a555156dc325a"
RUNSC_DIR=/usr/local/lib/cellmate
fetch_runsc() {
  [ -x "$RUNSC_DIR/runsc" ] && return 0
  [ "$(dpkg --print-architecture 2>/dev/null)" = amd64 ] || return 1
  local work; work=$(mktemp -d)
  mkdir -p "$work/lists" "$work/cache" "$work/debs"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" >"$work/sources.list"
  local apt=(-o "Dir::Etc::sourcelist=$work/sources.list" -o Dir::Etc::sourceparts=/dev/null
             -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o APT::Sandbox::User=root)
  if apt-get "${apt[@]}" update -q >/dev/null 2>&1 \
     && (cd "$work/debs" && apt-get "${apt[@]}" download "runsc=0.0~20240729.0-4+b7" >/dev/null 2>&1) \
     && echo "$RUNSC_SHA256  $work/debs/$RUNSC_DEB" | sha256sum -c --status \
     && dpkg -x "$work/debs/$RUNSC_DEB" "$work/root"; then
    mkdir -p "$RUNSC_DIR"
    install -m 0755 "$work/root/usr/bin/runsc" "$RUNSC_DIR/runsc"
    rm -rf "$work"
    log "installed gVisor's trixie runsc (2024-07-29, checksum verified) as $RUNSC_DIR/runsc."
    return 0
  fi
  rm -rf "$work"
  return 1
}
if fetch_runsc; then
  export CELLMATE_RUNSC="$RUNSC_DIR/runsc"
else
  log "could not fetch the pinned trixie runsc ($RUNSC_DEB); using Debian's $(command -v runsc)."
  export CELLMATE_RUNSC="$(command -v runsc)"
fi

# The default runtime `runsc` has no network at all (sandboxes are offline by default);
# `runsc-net` is for the allowlist network only (see register_runtimes above).
mkdir -p /etc/docker
register_runtimes

if pgrep -x dockerd >/dev/null 2>&1; then
  log "dockerd is running but does not answer; restarting it to load the runtime configuration."
  pkill -x dockerd || true
  for _ in $(seq 1 30); do pgrep -x dockerd >/dev/null || break; sleep 1; done
fi

if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
  log "starting docker with systemctl ..."
  systemctl start docker
else
  log "starting dockerd in the background (log: /var/log/cellmate-dockerd.log) ..."
  nohup dockerd >/var/log/cellmate-dockerd.log 2>&1 &
fi

for _ in $(seq 1 60); do
  if engine_answers; then
    log "Docker engine is up: $(docker info --format '{{.ServerVersion}}, storage {{.Driver}}, runtimes: {{range $k, $v := .Runtimes}}{{$k}} {{end}}')"
    if [ "${CELLMATE_NETWORK:-off}" = allowlist ]; then
      "$(dirname "$0")/guard-sandbox-network.sh" add "${CELLMATE_NETWORK_PROXY_PORT:-3128}"
    fi
    exit 0
  fi
  sleep 1
done
log "dockerd did not answer within 60 s; see /var/log/cellmate-dockerd.log"
exit 1
