# Sourced by benchmark scripts that run `tessera serve` in the background: they store its pid
# in SERVE_PID; stop_serve ends it (on SIGTERM serve stops its coordinator and workers) and
# waits. Callers also `trap stop_serve EXIT`, so an interrupted run leaves nothing behind.
SERVE_PID=
stop_serve() {
  if [[ -n $SERVE_PID ]] && kill -0 "$SERVE_PID" 2>/dev/null; then
    kill -TERM "$SERVE_PID"; wait "$SERVE_PID" || true
  fi
  SERVE_PID=
}
