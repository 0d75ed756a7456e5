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
  rm -f "$PIDFILE"
}
