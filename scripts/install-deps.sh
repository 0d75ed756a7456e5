#!/usr/bin/env bash
# System packages the build needs, installed from Debian's archive when missing:
# RocksDB (the riffle-rocksdb state backend links the system library, ROCKSDB_LIB_DIR in
# .cargo/config.toml, instead of compiling RocksDB from source, ~35 min on 2 cores) and libclang
# (bindgen generates RocksDB's bindings); for librdkafka, which riffle-kafka builds from source:
# OpenSSL and zlib headers, cmake-free (its own configure), zstd is compiled by the zstd-sys crate;
# Debian's Chromium for the web UI test; psql and openssl for the `riffle serve` tests.
set -euo pipefail

missing=()
[ -e /usr/include/rocksdb/c.h ] && ls /usr/lib/x86_64-linux-gnu/librocksdb.so >/dev/null 2>&1 || missing+=(librocksdb-dev)
ls /usr/lib/llvm-*/lib/libclang.so* >/dev/null 2>&1 || missing+=(libclang-dev)
[ -e /usr/include/openssl/ssl.h ] || missing+=(libssl-dev)
[ -e /usr/include/zlib.h ] || missing+=(zlib1g-dev)
command -v pkg-config >/dev/null || missing+=(pkg-config)
# Headless Chromium for the web UI test (driven by playwright-core, see scripts/test-tools.sh).
[ -x /usr/bin/chromium ] || missing+=(chromium)
# psql, the Postgres client the `riffle serve` tests connect with, and openssl, which makes the
# certificate of their TLS test.
command -v psql >/dev/null || missing+=(postgresql-client)
command -v openssl >/dev/null || missing+=(openssl)
# The PostgreSQL server for the Postgres connector tests (scripts/postgres.sh starts one).
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || missing+=(postgresql)
if [ ${#missing[@]} -gt 0 ]; then
    echo "install-deps.sh: installing ${missing[*]}" >&2
    command -v apt-get >/dev/null || { echo "install-deps.sh: need ${missing[*]} (Debian/Ubuntu packages)" >&2; exit 1; }
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
