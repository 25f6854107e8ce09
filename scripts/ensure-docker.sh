#!/usr/bin/env bash
# Make sure a Docker engine answers. An engine that already works is used as it is and never
# touched. Otherwise, on a Debian/Ubuntu machine where we are root, install Debian's docker.io
# and runsc (gVisor), register runsc as a runtime, start dockerd in the background and wait
# for it. Anywhere else, print what the operator has to install, and fail.
set -euo pipefail

log() { echo "[cellmate] $*" >&2; }
engine_answers() { timeout 10 docker info >/dev/null 2>&1; }

if command -v docker >/dev/null 2>&1 && engine_answers; then
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

# gVisor cannot create its own network stack inside the root network namespace of this kind of
# machine, so the registered runtime always runs without network (sandboxes are offline anyway).
mkdir -p /etc/docker
python3 - <<'PY'
import json, pathlib, shutil
path = pathlib.Path("/etc/docker/daemon.json")
config = json.loads(path.read_text()) if path.exists() and path.read_text().strip() else {}
runsc = shutil.which("runsc")
runtimes = config.setdefault("runtimes", {})
if runsc and "runsc" not in runtimes:
    runtimes["runsc"] = {"path": runsc, "runtimeArgs": ["--network=none"]}
    path.write_text(json.dumps(config, indent=2) + "\n")
    print("[cellmate] registered runtime 'runsc' in /etc/docker/daemon.json")
PY

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
    exit 0
  fi
  sleep 1
done
log "dockerd did not answer within 60 s; see /var/log/cellmate-dockerd.log"
exit 1
