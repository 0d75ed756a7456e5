#!/usr/bin/env bash
# A local PostgreSQL server for Riffle's tests and demos: Debian's PostgreSQL (installed by
# scripts/install-deps.sh when missing), a cluster of its own in a temporary data directory, on
# 127.0.0.1 only, trust authentication for the superuser `riffle`, `wal_level = logical` (for
# change data capture). PostgreSQL refuses to run as root: as root, the server runs as the
# `postgres` user (the package creates it), in a directory that user owns.
#
#   scripts/postgres.sh start    create the cluster if needed, start it, wait until it answers
#   scripts/postgres.sh stop     stop it (a fast shutdown: open sessions are ended)
#   scripts/postgres.sh remove   stop it and delete its cluster (the next start makes a new one)
#   scripts/postgres.sh env      print the URL that reaches it (eval "$(... env)")
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TOOLS=${RIFFLE_TOOLS_DIR:-$ROOT/.tools}
PORT_FILE=$TOOLS/postgres.port
PIDFILE=$TOOLS/postgres.pid
LOG=$TOOLS/postgres.log
# Where the cluster is: a directory of its own under /tmp (the clone may sit in a directory the
# `postgres` user cannot enter, as `mktemp -d` makes them), remembered here.
DATA_FILE=$TOOLS/postgres.datadir

NAME=postgres
# shellcheck source=scripts/service.sh
. "$ROOT/scripts/service.sh"
PORT=$(configured_port RIFFLE_POSTGRES_PORT "${RIFFLE_POSTGRES_PORT:-}" 5442)

bin_dir() {
  local dir
  dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  [ -n "$dir" ] && [ -x "$dir/postgres" ] || {
    echo "postgres: no PostgreSQL server under /usr/lib/postgresql (scripts/install-deps.sh installs Debian's postgresql)" >&2
    exit 1
  }
  echo "$dir"
}

# Runs a command as the server's user: `postgres` when we are root, ourselves otherwise
# (setpriv execs it: the pid we keep is the server's own).
AS_SERVER=()
if [ "$(id -u)" -eq 0 ]; then AS_SERVER=(setpriv --reuid=postgres --regid=postgres --init-groups --); fi
as_server() {
  "${AS_SERVER[@]}" "$@"
}

ready() {
  port_answers "$PORT" && "$BIN/pg_isready" -q -h 127.0.0.1 -p "$PORT"
}

case "${1:-}" in
  start)
    BIN=$(bin_dir)
    mkdir -p "$TOOLS"
    if running && ready; then
      echo "postgres: already running on 127.0.0.1:$PORT" >&2
      exit 0
    fi
    move_if_taken 1 "${RIFFLE_POSTGRES_PORT:-}"
    DATA=$(cat "$DATA_FILE" 2>/dev/null || true)
    if [ -z "$DATA" ] || [ ! -f "$DATA/PG_VERSION" ]; then
      DATA=$(mktemp -d /tmp/riffle-postgres-XXXXXX)
      if [ "$(id -u)" -eq 0 ]; then chown postgres:postgres "$DATA"; fi
      as_server "$BIN/initdb" -D "$DATA" -U riffle -A trust -E UTF8 --no-locale >"$LOG" 2>&1 || {
        echo "postgres: initdb failed; its output:" >&2
        cat "$LOG" >&2
        exit 1
      }
      echo "$DATA" >"$DATA_FILE"
    fi
    start_and_wait 300 "${AS_SERVER[@]}" "$BIN/postgres" -D "$DATA" -p "$PORT" \
      -c listen_addresses=127.0.0.1 -c unix_socket_directories="$DATA" \
      -c wal_level=logical -c max_wal_senders=10 -c max_replication_slots=10 \
      -c max_connections=200 -c fsync=off -c synchronous_commit=off -c full_page_writes=off
    "$BIN/psql" -q -h 127.0.0.1 -p "$PORT" -U riffle -d postgres -tAc \
      "SELECT 1 FROM pg_database WHERE datname = 'riffle'" | grep -q 1 ||
      "$BIN/psql" -q -h 127.0.0.1 -p "$PORT" -U riffle -d postgres -c "CREATE DATABASE riffle" >&2
    echo "postgres: PostgreSQL $("$BIN/postgres" --version | awk '{print $3}') listening on 127.0.0.1:$PORT (data in $DATA)" >&2
    ;;
  stop)
    # SIGINT: a fast shutdown (SIGTERM would wait for every session to end).
    if running; then
      kill -INT "$(cat "$PIDFILE")"
      for _ in $(seq 1 200); do
        running || break
        sleep 0.1
      done
      if running; then kill -9 "$(cat "$PIDFILE")"; fi
      echo "postgres: stopped" >&2
    fi
    rm -f "$PIDFILE"
    ;;
  remove)
    "$ROOT/scripts/postgres.sh" stop
    DATA=$(cat "$DATA_FILE" 2>/dev/null || true)
    # Only a directory this script made (mktemp's name under /tmp) is deleted.
    case "$DATA" in
      /tmp/riffle-postgres-*) rm -rf "$DATA" ;;
    esac
    rm -f "$DATA_FILE"
    ;;
  env)
    echo "export RIFFLE_POSTGRES_URL=postgresql://riffle@127.0.0.1:$PORT/riffle"
    ;;
  *)
    echo "usage: scripts/postgres.sh start|stop|remove|env" >&2
    exit 2
    ;;
esac
