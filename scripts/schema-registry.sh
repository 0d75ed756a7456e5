#!/usr/bin/env bash
# A local schema registry with the Confluent Schema Registry API, for the Avro format's tests and
# demos: Apicurio Registry (its `ccompat/v7` API speaks Confluent's protocol), the Quarkus
# application from Maven Central (io.apicurio:apicurio-registry-app, the `all` tarball), fetched
# with mvn into .tools/ on first use and run on Java 17 with its in-memory storage.
#
#   scripts/schema-registry.sh start    fetch if needed, start, wait until it answers
#   scripts/schema-registry.sh stop     stop it (its schemas go with it)
#   scripts/schema-registry.sh env      print the settings that reach it (eval "$(... env)")
#
# Compatibility is BACKWARD for every subject, as Confluent's registry has by default (Apicurio's
# default is none): registering a schema that cannot read the subject's last one is refused.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TOOLS=${RIFFLE_TOOLS_DIR:-$ROOT/.tools}
# 3.0.9 is the newest release that runs on Java 17 (3.1 and later need Java 21).
VERSION=${RIFFLE_REGISTRY_VERSION:-3.0.9}
PORT_FILE=$TOOLS/schema-registry.port
HOME_DIR=$TOOLS/apicurio-registry-$VERSION
APP=$HOME_DIR/app
PIDFILE=$TOOLS/schema-registry.pid
LOG=$TOOLS/schema-registry.log

fetch() {
  if [ -f "$APP/.complete" ]; then
    return
  fi
  command -v mvn >/dev/null || { echo "schema-registry: mvn is required to fetch Apicurio Registry from Maven Central" >&2; exit 1; }
  command -v java >/dev/null || { echo "schema-registry: java (17 or newer) is required" >&2; exit 1; }
  echo "schema-registry: fetching io.apicurio:apicurio-registry-app:$VERSION into $HOME_DIR" >&2
  mkdir -p "$HOME_DIR"
  rm -rf "$HOME_DIR/dl" "$APP"
  # `dependency:copy` fetches the one artifact (the registry's parent POM of this version is not
  # needed, and not served everywhere).
  (cd "$HOME_DIR" && mvn -q -B -Dstyle.color=never dependency:copy \
    -Dartifact="io.apicurio:apicurio-registry-app:$VERSION:tar.gz:all" -DoutputDirectory="$HOME_DIR/dl" >&2)
  mkdir -p "$APP"
  tar xzf "$HOME_DIR/dl/apicurio-registry-app-$VERSION-all.tar.gz" -C "$APP"
  rm -rf "$HOME_DIR/dl"
  touch "$APP/.complete"
}

NAME=schema-registry
# shellcheck source=scripts/service.sh
. "$ROOT/scripts/service.sh"
PORT=$(configured_port RIFFLE_REGISTRY_PORT "${RIFFLE_REGISTRY_PORT:-}" 8781)

# Started: the Confluent-compatible API answers 200 (asked with bash alone: no curl needed).
ready() {
  port_answers "$PORT" && (
    exec 3<>/dev/tcp/127.0.0.1/"$PORT"
    printf 'GET /apis/ccompat/v7/subjects HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
    head -n 1 <&3 | grep -q ' 200 '
  ) 2>/dev/null
}

runner_jar() {
  local jar
  for jar in "$APP"/quarkus-run.jar "$APP"/*-runner.jar "$APP"/*/quarkus-run.jar "$APP"/*/*-runner.jar; do
    if [ -f "$jar" ]; then echo "$jar"; return; fi
  done
  echo "schema-registry: no runnable jar under $APP" >&2
  exit 1
}

case "${1:-}" in
  start)
    fetch
    mkdir -p "$TOOLS"
    if running && ready; then
      echo "schema-registry: already running on 127.0.0.1:$PORT" >&2
      exit 0
    fi
    # The HTTP port and the management (health) port after it.
    move_if_taken 2 "${RIFFLE_REGISTRY_PORT:-}"
    start_and_wait 1200 java -Xmx512m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC \
      -Dquarkus.http.host=127.0.0.1 -Dquarkus.http.port="$PORT" \
      -Dquarkus.management.host=127.0.0.1 -Dquarkus.management.port=$((PORT + 1)) \
      -Dquarkus.http.access-log.enabled=false -Dquarkus.log.level=WARN \
      -Dapicurio.rules.global.compatibility=BACKWARD \
      -jar "$(runner_jar)"
    echo "schema-registry: Apicurio Registry $VERSION on http://127.0.0.1:$PORT/apis/ccompat/v7 (Confluent API)" >&2
    ;;
  stop)
    stop_service
    ;;
  env)
    echo "export RIFFLE_SCHEMA_REGISTRY_URL=http://127.0.0.1:$PORT/apis/ccompat/v7"
    ;;
  *)
    echo "usage: scripts/schema-registry.sh start|stop|env" >&2
    exit 2
    ;;
esac
