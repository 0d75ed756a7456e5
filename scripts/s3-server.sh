#!/usr/bin/env bash
# A local S3-compatible server for Riffle's tests and demos: s3s-fs, the S3 API over a directory
# (https://crates.io/crates/s3s-fs), installed from crates.io into .tools/ on first use.
#
#   scripts/s3-server.sh start    install if needed, start on 127.0.0.1, wait until it answers
#   scripts/s3-server.sh stop     stop it
#   scripts/s3-server.sh env      print the AWS_* settings that reach it (eval "$(... env)")
#
# Why s3s-fs: MinIO is under the AGPL; s3s-fs 0.14.1 builds with this project's Rust (1.95) in
# about 1.5 minutes and passed put/get/range/list/multipart/copy/conditional-put with the
# object_store crate. Newer s3s-fs versions need a newer Rust.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TOOLS=${RIFFLE_TOOLS_DIR:-$ROOT/.tools}
PORT_FILE=$TOOLS/s3s-fs.port
DATA=$TOOLS/s3-data
PIDFILE=$TOOLS/s3s-fs.pid
LOG=$TOOLS/s3s-fs.log
BIN=$TOOLS/bin/s3s-fs
BUCKET=riffle-test
ACCESS_KEY=riffle
SECRET_KEY=riffle-secret-key

install() {
  if [ ! -x "$BIN" ]; then
    echo "s3-server: installing s3s-fs 0.14.1 into $TOOLS (about 1.5 min)" >&2
    cargo install s3s-fs@0.14.1 --features binary --locked --root "$TOOLS" >&2
  fi
}

NAME=s3-server
# shellcheck source=scripts/service.sh
. "$ROOT/scripts/service.sh"
PORT=$(configured_port RIFFLE_S3_PORT "${RIFFLE_S3_PORT:-}" 9014)

# Started: our process runs and the port answers.
ready() {
  running && port_answers "$PORT"
}

case "${1:-}" in
  start)
    install
    mkdir -p "$DATA/$BUCKET"
    if running && ready; then
      echo "s3-server: already running on 127.0.0.1:$PORT" >&2
      exit 0
    fi
    move_if_taken 1 "${RIFFLE_S3_PORT:-}"
    start_and_wait 100 "$BIN" --host 127.0.0.1 --port "$PORT" --access-key "$ACCESS_KEY" --secret-key "$SECRET_KEY" "$DATA"
    echo "s3-server: s3s-fs listening on 127.0.0.1:$PORT, bucket $BUCKET" >&2
    ;;
  stop)
    stop_service
    ;;
  env)
    echo "export AWS_ENDPOINT=http://127.0.0.1:$PORT AWS_ALLOW_HTTP=true AWS_REGION=us-east-1"
    echo "export AWS_ACCESS_KEY_ID=$ACCESS_KEY AWS_SECRET_ACCESS_KEY=$SECRET_KEY RIFFLE_TEST_S3_BUCKET=$BUCKET"
    ;;
  *)
    echo "usage: $0 start|stop|env" >&2
    exit 2
    ;;
esac
