#!/usr/bin/env bash
# The Docker engine for the live testbed and image builds: install Debian's docker.io if missing and
# start dockerd in the background (no systemd needed). Idempotent.  Usage: infra/docker.sh install|start|stop|status
set -euo pipefail
LOG=${DOCKERD_LOG:-/tmp/testbed-dockerd.log}

running() { docker info >/dev/null 2>&1; }

case "${1:-start}" in
  install)
    if ! command -v dockerd >/dev/null; then
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null
    fi ;;
  start)
    "$0" install
    if ! running; then
      nohup dockerd >"$LOG" 2>&1 &
      for _ in $(seq 1 60); do running && break; sleep 1; done
      running || { echo "dockerd did not start; see $LOG" >&2; exit 1; }
    fi
    echo "docker engine ready: $(docker version --format '{{.Server.Version}}')" ;;
  stop)
    pkill -x dockerd || true ;;
  status)
    running && echo "docker engine running" || { echo "docker engine not running"; exit 1; } ;;
  *) echo "usage: $0 install|start|stop|status" >&2; exit 2 ;;
esac
