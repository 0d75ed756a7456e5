#!/usr/bin/env bash
# A local Apache Kafka broker for Riffle's tests and demos: Kafka 4.x in KRaft mode (one node,
# broker and controller in one process) on 127.0.0.1, from the jars on Maven Central
# (org.apache.kafka:kafka_2.13 and its dependencies), fetched with mvn into .tools/ on first use.
#
#   scripts/kafka.sh start    fetch if needed, format the log directory, start, wait until it answers
#   scripts/kafka.sh stop     stop it
#   scripts/kafka.sh env      print the settings that reach it (eval "$(... env)")
#
# The transaction state log and the offsets topic have replication factor 1 (one broker), so
# transactions (exactly-once) work. Kafka-compatible brokers from crates.io or PyPI were tried and
# show aborted transactions to read_committed consumers (../shared/DESIGN.md): not used here.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TOOLS=${RIFFLE_TOOLS_DIR:-$ROOT/.tools}
VERSION=${RIFFLE_KAFKA_VERSION:-4.1.1}
PORT_FILE=$TOOLS/kafka.port
HOME_DIR=$TOOLS/kafka-$VERSION
LIBS=$HOME_DIR/libs
DATA=$TOOLS/kafka-data
CONFIG=$TOOLS/kafka-server.properties
PIDFILE=$TOOLS/kafka.pid
LOG=$TOOLS/kafka.log

fetch() {
  if [ -f "$LIBS/.complete" ]; then
    return
  fi
  command -v mvn >/dev/null || { echo "kafka: mvn is required to fetch Kafka from Maven Central" >&2; exit 1; }
  command -v java >/dev/null || { echo "kafka: java (17 or newer) is required" >&2; exit 1; }
  echo "kafka: fetching org.apache.kafka:kafka_2.13:$VERSION and its dependencies into $LIBS" >&2
  mkdir -p "$HOME_DIR"
  cat >"$HOME_DIR/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>riffle.tools</groupId>
  <artifactId>kafka-broker</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>$VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>2.24.3</version>
    </dependency>
  </dependencies>
</project>
EOF
  mvn -q -B -Dstyle.color=never -f "$HOME_DIR/pom.xml" dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$LIBS" >&2
  touch "$LIBS/.complete"
}

NAME=kafka
# shellcheck source=scripts/service.sh
. "$ROOT/scripts/service.sh"
PORT=$(configured_port RIFFLE_KAFKA_PORT "${RIFFLE_KAFKA_PORT:-}" 9092)

# Started: the port answers and the server says so (the port opens a moment before).
ready() {
  port_answers "$PORT" && grep -q "Kafka Server started" "$LOG" 2>/dev/null
}

kafka_java() {
  java -Xms256m -Xmx768m -XX:+UseG1GC -Dlog4j2.configurationFile="$TOOLS/kafka-log4j2.properties" \
    -cp "$LIBS/*" "$@"
}

configure() {
  cat >"$TOOLS/kafka-log4j2.properties" <<EOF
rootLogger.level = warn
rootLogger.appenderRef.stdout.ref = STDOUT
appender.stdout.type = Console
appender.stdout.name = STDOUT
appender.stdout.layout.type = PatternLayout
appender.stdout.layout.pattern = [%d] %p %m (%c)%n
logger.server.name = kafka.server.KafkaRaftServer
logger.server.level = info
EOF
  cat >"$CONFIG" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$((PORT + 1))
listeners=PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$((PORT + 1))
advertised.listeners=PLAINTEXT://127.0.0.1:$PORT
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=$DATA
num.partitions=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=8
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=8
min.insync.replicas=1
group.initial.rebalance.delay.ms=0
group.consumer.session.timeout.ms=6000
group.consumer.min.session.timeout.ms=2000
group.consumer.heartbeat.interval.ms=1000
group.consumer.min.heartbeat.interval.ms=500
# A process that dies leaves its open transaction hanging until the broker aborts it, which
# holds read_committed readers of the partitions it wrote to: transaction.timeout.ms (10 s for a
# process group) plus this check's interval (10 s by default). See docs/scale-out.md.
transaction.abort.timed.out.transaction.cleanup.interval.ms=1000
auto.create.topics.enable=false
EOF
}

case "${1:-}" in
  start)
    fetch
    mkdir -p "$TOOLS"
    if running && ready; then
      echo "kafka: already running on 127.0.0.1:$PORT" >&2
      exit 0
    fi
    # The broker's port and the controller's after it.
    move_if_taken 2 "${RIFFLE_KAFKA_PORT:-}"
    configure
    if [ ! -f "$DATA/meta.properties" ]; then
      rm -rf "$DATA"
      kafka_java kafka.tools.StorageTool format --config "$CONFIG" \
        --cluster-id "$(kafka_java kafka.tools.StorageTool random-uuid)" >&2
    fi
    start_and_wait 600 java -Xms256m -Xmx768m -XX:+UseG1GC \
      -Dlog4j2.configurationFile="$TOOLS/kafka-log4j2.properties" -cp "$LIBS/*" kafka.Kafka "$CONFIG"
    echo "kafka: Kafka $VERSION listening on 127.0.0.1:$PORT (KRaft, one node)" >&2
    ;;
  stop)
    stop_service
    ;;
  env)
    echo "export RIFFLE_KAFKA_BOOTSTRAP=127.0.0.1:$PORT"
    # The broker's process, for benchmarks that account its CPU time.
    if running; then echo "export RIFFLE_KAFKA_PID=$(cat "$PIDFILE")"; fi
    ;;
  *)
    echo "usage: scripts/kafka.sh start|stop|env" >&2
    exit 2
    ;;
esac
