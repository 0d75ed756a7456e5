# Shared by the scripts that run a local server for tests and demos (sourced, not run):
# a server started in the background with its pid in $PIDFILE and its output in $LOG.
# The sourcing script sets NAME, PIDFILE and LOG, and defines `ready` (true once it answers).

running() {
  [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null
}

# Whether something accepts connections on 127.0.0.1:$1.
port_answers() {
  (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null
}

# The port of this server (prints it): $2 when the user set it ($1 names that setting); else the
# port a server of this directory was moved to ($PORT_FILE); else $3, the default.
configured_port() {
  local setting=$1 value=$2 default=$3
  if [ -n "$value" ]; then
    echo "$value"
  elif [ -f "$PORT_FILE" ]; then
    cat "$PORT_FILE"
  else
    echo "$default"
  fi
}

# Before a start: when $PORT (or one of the $1 ports after it) is taken by another process
# than this directory's server, and the user did not ask for the port (${2} is empty), moves to
# the first free ports from $PORT + 10 on, remembered in $PORT_FILE for `env` and `stop`. Two
# clones' test runs on one machine then get a server each instead of one failing to start.
move_if_taken() {
  local count=$1 asked=$2 port=$PORT taken
  taken() {
    local p
    for p in $(seq "$1" $(($1 + count - 1))); do
      if port_answers "$p"; then return 0; fi
    done
    return 1
  }
  if ! taken "$port"; then return 0; fi
  if [ -n "$asked" ]; then
    echo "$NAME: port $port is taken by another process (set by the user: not moved)" >&2
    return 0
  fi
  port=$((port + 10))
  while taken "$port"; do port=$((port + 10)); done
  echo "$NAME: port $PORT is taken by another process; using $port" >&2
  PORT=$port
  echo "$PORT" >"$PORT_FILE"
}

# Runs the command in the background and waits up to $1 tenths of a second for `ready`; on
# failure prints the server's output and exits 1.
start_and_wait() {
  local tenths=$1
  shift
  nohup "$@" >"$LOG" 2>&1 &
  echo $! >"$PIDFILE"
  for _ in $(seq 1 "$tenths"); do
    if ready; then
      return 0
    fi
    if ! running; then break; fi
    sleep 0.1
  done
  echo "$NAME: did not start; its output:" >&2
  cat "$LOG" >&2
  exit 1
}

# Stops the server: TERM, up to 20 s to exit, then KILL.
stop_service() {
  if running; then
    kill "$(cat "$PIDFILE")"
    for _ in $(seq 1 200); do
      running || break
      sleep 0.1
    done
    if running; then kill -9 "$(cat "$PIDFILE")"; fi
    echo "$NAME: stopped" >&2
  fi
  # The port file stays: a server stopped and started again (a test of a broker outage) comes
  # back on the port the running tests were given, even when the default port is free by then.
  rm -f "$PIDFILE"
}
