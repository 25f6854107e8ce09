#!/bin/bash
# Start PostgreSQL on PGDATA, making the cluster first when PGDATA holds none: the database
# POSTGRES_DB owned by POSTGRES_USER (both `cellmate` unless set), whose password is
# POSTGRES_PASSWORD or the content of the file POSTGRES_PASSWORD_FILE (a mounted Secret).
# Every connection but the superuser's over the local socket authenticates with
# scram-sha-256; the superuser `postgres` has no password and cannot log in over TCP.
# The password is read on the first start only: change it later with ALTER ROLE.
set -euo pipefail
log() { echo "cellmate-postgres: $*" >&2; }

: "${PGDATA:?PGDATA must be set}"
user="${POSTGRES_USER:-cellmate}"
database="${POSTGRES_DB:-cellmate}"

read_password() {
  if [ -n "${POSTGRES_PASSWORD_FILE:-}" ]; then
    if [ ! -r "$POSTGRES_PASSWORD_FILE" ]; then
      log "POSTGRES_PASSWORD_FILE=$POSTGRES_PASSWORD_FILE cannot be read"
      exit 1
    fi
    # A trailing newline (as `echo` or an editor leaves it) is not part of the password.
    password=$(<"$POSTGRES_PASSWORD_FILE")
  else
    password="${POSTGRES_PASSWORD:-}"
  fi
  if [ -z "$password" ]; then
    log "a new cluster needs a password: set POSTGRES_PASSWORD or POSTGRES_PASSWORD_FILE"
    exit 1
  fi
}

initialise() {
  log "no cluster in $PGDATA: creating one, with database $database owned by $user"
  read_password
  # Made beside PGDATA and moved into place when complete, so that a start interrupted
  # half-way leaves nothing a later start would take for a cluster. (A PGDATA that is
  # itself an empty mount point cannot be replaced: the cluster is made in it.)
  local target="$PGDATA.new"
  if [ -d "$PGDATA" ]; then
    target="$PGDATA"
  else
    rm -rf "$target"
  fi
  mkdir -p "$target"
  chmod 0700 "$target"
  # initdb's own pg_hba.conf is replaced before any server reads it.
  initdb --pgdata="$target" --username=postgres --encoding=UTF8 --locale=C.UTF-8 \
    --auth=trust >/dev/null
  cat >"$target/pg_hba.conf" <<HBA
# TYPE  DATABASE  USER      ADDRESS  METHOD
local   all       postgres           peer
local   all       all                scram-sha-256
host    all       postgres  all      reject
host    all       all       all      scram-sha-256
HBA
  cat >>"$target/postgresql.conf" <<CONF

# cellmate-postgres
listen_addresses = '*'
port = 5432
password_encryption = scram-sha-256
CONF
  # The role and database over the local socket of a server nobody else can reach yet.
  local socket
  socket=$(mktemp -d)
  pg_ctl --pgdata="$target" --silent --wait \
    --options="-c listen_addresses='' -c unix_socket_directories='$socket'" start >/dev/null
  CELLMATE_PASSWORD="$password" psql --host="$socket" --username=postgres --dbname=postgres \
    --no-psqlrc --quiet --set=ON_ERROR_STOP=1 --set=user="$user" --set=database="$database" <<'SQL'
\getenv password CELLMATE_PASSWORD
CREATE ROLE :"user" LOGIN PASSWORD :'password';
CREATE DATABASE :"database" OWNER :"user";
SQL
  pg_ctl --pgdata="$target" --silent --wait --mode=fast stop >/dev/null
  rmdir "$socket"
  if [ "$target" != "$PGDATA" ]; then
    mv "$target" "$PGDATA"
  fi
  log "cluster ready"
}

if [ ! -s "$PGDATA/PG_VERSION" ]; then
  if [ -d "$PGDATA" ] && [ -n "$(ls -A "$PGDATA")" ]; then
    log "$PGDATA holds files but no cluster (no PG_VERSION): empty it, or point PGDATA elsewhere"
    exit 1
  fi
  initialise
fi
unset POSTGRES_PASSWORD
exec postgres "$@"
