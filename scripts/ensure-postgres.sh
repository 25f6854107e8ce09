#!/usr/bin/env bash
# Make PostgreSQL's server binaries (initdb, pg_ctl, postgres) available for the tests, which
# start a throwaway server of their own. Binaries on PATH or in Debian's
# /usr/lib/postgresql/<version>/bin are used as they are; otherwise, on Debian/Ubuntu as root,
# Debian's `postgresql` package is installed (its own cluster is not started). Anywhere else,
# print what to install, and fail. Prints the binaries' directory on stdout.
set -euo pipefail
log() { echo "[cellmate] $*" >&2; }

find_binaries() {
  local dir
  if command -v initdb >/dev/null 2>&1; then
    dir=$(dirname "$(command -v initdb)")
    if [ -x "$dir/pg_ctl" ] && [ -x "$dir/postgres" ]; then
      echo "$dir"
      return 0
    fi
  fi
  # The newest version first.
  for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k5 -rn); do
    if [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ] && [ -x "$dir/postgres" ]; then
      echo "$dir"
      return 0
    fi
  done
  return 1
}

if dir=$(find_binaries); then
  echo "$dir"
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  log "PostgreSQL's server binaries are missing: installing Debian's postgresql with apt-get ..."
  # The package would start a cluster of its own on port 5432: the tests need none.
  policy=/usr/sbin/policy-rc.d
  made_policy=""
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && made_policy=1
  fi
  trap 'if [ -n "$made_policy" ]; then rm -f "$policy"; fi' EXIT
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null \
    || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null; }
  if dir=$(find_binaries); then
    log "installed Debian's postgresql: binaries in $dir"
    echo "$dir"
    exit 0
  fi
  log "installed Debian's postgresql, but found no initdb, pg_ctl and postgres afterwards"
  exit 1
fi
log "Install PostgreSQL's server binaries (Debian/Ubuntu: apt-get install postgresql), or run this as root."
exit 1
