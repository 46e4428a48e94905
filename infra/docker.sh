#!/usr/bin/env bash
# The Docker engine for the live testbed and image builds: install Debian's docker.io if missing and
# start dockerd in the background (no systemd needed). Idempotent.  Usage: infra/docker.sh install|start|stop|status
#
# `start` leaves an engine that runs already alone; one it starts itself it records in a pid file
# (DOCKERD_PIDFILE), and `stop` stops only that one: a dockerd the machine runs otherwise is never
# touched. What it does (installing, starting, stopping) goes to stderr, one line per step, and
# nothing when there is nothing to do; the engine's version and status go to stdout.
set -euo pipefail
. "$(dirname "$0")/detach.sh"
LOG=${DOCKERD_LOG:-/tmp/testbed-dockerd.log}
PIDFILE=${DOCKERD_PIDFILE:-/tmp/testbed-dockerd.pid}
STOP_WAIT_S=${DOCKERD_STOP_WAIT_S:-60}

running() { docker info >/dev/null 2>&1; }
say() { echo "docker.sh: $*" >&2; }

is_dockerd() { [ -n "${1:-}" ] && [ "$(cat "/proc/$1/comm" 2>/dev/null)" = dockerd ]; }

# The pid of the dockerd this script started: the one in the pid file, or (an engine started before
# the pid file existed) the dockerd whose output goes to our log. Empty if there is none.
own_pid() {
  local pid
  if [ -f "$PIDFILE" ]; then
    pid=$(cat "$PIDFILE" 2>/dev/null || true)
    if is_dockerd "$pid"; then echo "$pid"; return; fi
    rm -f "$PIDFILE"   # stale: that engine has gone
  fi
  logging_pid
}

# The dockerd whose output goes to our log. Empty if there is none.
logging_pid() {
  local pid
  for pid in $(pgrep -x dockerd || true); do
    if [ "$(readlink "/proc/$pid/fd/1" 2>/dev/null)" = "$LOG" ]; then echo "$pid"; return; fi
  done
}

case "${1:-start}" in
  install)
    if ! command -v dockerd >/dev/null; then
      say "installing Docker (Debian's docker.io)…"
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null
    fi ;;
  start)
    "$0" install
    if ! running; then
      say "starting dockerd…"
      detached nohup dockerd >"$LOG" 2>&1 &
      for _ in $(seq 1 60); do running && break; sleep 1; done
      running || { say "dockerd did not start; see $LOG"; exit 1; }
      logging_pid >"$PIDFILE"   # not $!: that is the shell that started it
    fi
    echo "docker engine ready: $(docker version --format '{{.Server.Version}}')" ;;
  stop)
    pid=$(own_pid)
    if [ -n "$pid" ]; then
      say "stopping dockerd (pid $pid)…"
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 "$STOP_WAIT_S"); do is_dockerd "$pid" || break; sleep 1; done
      if is_dockerd "$pid"; then say "dockerd (pid $pid) did not stop in ${STOP_WAIT_S}s"; exit 1; fi
      rm -f "$PIDFILE"
    elif running; then
      say "the running docker engine was not started by infra/docker.sh: left running"
    fi ;;
  status)
    running && echo "docker engine running" || { echo "docker engine not running"; exit 1; } ;;
  *) echo "usage: $0 install|start|stop|status" >&2; exit 2 ;;
esac
