#!/usr/bin/env bash
# Make a Compose command available for running docker-compose.yml: `docker compose` (v2)
# when present, else `docker-compose`; on Debian/Ubuntu as root, install Debian's
# docker-compose when neither exists. Prints the command to use on stdout.
set -euo pipefail
log() { echo "[cellmate] $*" >&2; }

if docker compose version >/dev/null 2>&1; then
  echo "docker compose"
  exit 0
fi
if command -v docker-compose >/dev/null 2>&1; then
  echo "docker-compose"
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  log "No Compose command found: installing Debian's docker-compose with apt-get ..."
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker-compose >/dev/null \
    || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker-compose >/dev/null; }
  log "installed docker-compose."
  echo "docker-compose"
  exit 0
fi
log "Install Docker Compose (https://docs.docker.com/compose/install/)."
exit 1
