#!/usr/bin/env bash
# Build the sandbox image (with --bot the bot's, with --azurite Azurite's, with --postgres
# PostgreSQL's) if its inputs changed. Where the official python base image can be neither
# found nor pulled (no registry), the base comes from debootstrap, which is installed here
# when missing and the machine allows it (root, apt). The sandbox image's languages beside
# Python are CELLMATE_SANDBOX_LANGUAGES (unset: r,javascript,bash; empty: Python only) or
# --languages; R and Node.js come from Debian through the host's apt-get, the JavaScript
# kernel through the host's npm.
set -euo pipefail
cd "$(dirname "$0")/.."
cellmate="${CELLMATE:-.venv/bin/cellmate}"

if ! command -v debootstrap >/dev/null 2>&1 \
   && ! docker image inspect python:3.11-slim-bookworm >/dev/null 2>&1 \
   && ! timeout 120 docker pull -q python:3.11-slim-bookworm >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "[cellmate] python:3.11-slim-bookworm cannot be pulled: installing debootstrap to build a base ..." >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null \
      || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null; }
  else
    echo "[cellmate] python:3.11-slim-bookworm cannot be pulled and debootstrap is missing: install debootstrap." >&2
    exit 1
  fi
fi
exec "$cellmate" build-image "$@"
