#!/usr/bin/env bash
# The live testbed's local services: RabbitMQ (with the management plugin), Redis, tesseract
# (and the DejaVu font the production display images use).
#
#   bash infra/services.sh install   apt-get install what is missing; enable rabbitmq_management
#   bash infra/services.sh start     start RabbitMQ and Redis in the background unless running; wait until ready
#   bash infra/services.sh stop      stop both
#   bash infra/services.sh status    one line per service; exit 1 if one is down
#
# Idempotent and non-interactive. Works without systemd (daemons are started directly), as root or
# through sudo. Endpoints: AMQP 127.0.0.1:5672 (guest/guest), management http://127.0.0.1:15672,
# Redis 127.0.0.1:6379.
set -euo pipefail

WAIT_S=${SERVICES_WAIT_S:-120}
REDIS_PORT=${REDIS_PORT:-6379}
REDIS_DIR=${REDIS_DIR:-/var/lib/redis}

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo -n "$@"; else
    echo "services.sh: '$*' needs root (or sudo)" >&2; return 1; fi
}

have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ]; }

rabbit_ctl() { as_root rabbitmqctl "$@"; }

rabbit_up() { as_root rabbitmq-diagnostics -q ping >/dev/null 2>&1; }   # node running (app may be stopped)
rabbit_app_up() { as_root rabbitmq-diagnostics -q check_running >/dev/null 2>&1; }
redis_up() { redis-cli -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG; }

install() {
  local missing=()
  have rabbitmq-server || missing+=(rabbitmq-server)
  have redis-server || missing+=(redis-server)
  have tesseract || missing+=(tesseract-ocr)
  [ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || missing+=(fonts-dejavu-core)  # production display font
  if [ ${#missing[@]} -gt 0 ]; then
    echo "services.sh: installing ${missing[*]}"
    # policy-rc.d may deny the packages' own start scripts: that is fine, `start` starts them.
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  enable_plugins
  echo "services.sh: installed (rabbitmq-server, redis-server, tesseract; rabbitmq_management and" \
       "rabbitmq_consistent_hash_exchange enabled)"
}

# The management API (monitoring) and the consistent-hash exchange (the live job mode's keyed routing,
# testbed/live/job.py); both ship with Debian's rabbitmq-server. --offline writes enabled_plugins
# and takes effect at the next start; on a running node they are enabled now.
PLUGINS="rabbitmq_management rabbitmq_consistent_hash_exchange"
enable_plugins() {
  local p
  for p in $PLUGINS; do
    grep -qs "$p" /etc/rabbitmq/enabled_plugins && continue
    if rabbit_up; then as_root rabbitmq-plugins -q enable "$p" >/dev/null
    else as_root rabbitmq-plugins -q enable --offline "$p" >/dev/null; fi
  done
}

start_rabbit() {
  local deadline=$((SECONDS + WAIT_S))
  if ! rabbit_up; then
    echo "services.sh: starting rabbitmq-server"
    as_root rabbitmq-server -detached
    until rabbit_up; do
      if [ $SECONDS -ge $deadline ]; then echo "services.sh: rabbitmq did not start in ${WAIT_S}s" >&2; return 1; fi
      sleep 1
    done
    rabbit_ctl -q await_startup --timeout "$WAIT_S" >/dev/null   # the node boots its app
  fi
  # a node whose app was stopped (rabbitmqctl stop_app) stays up without the broker: start it
  if ! rabbit_app_up; then
    echo "services.sh: starting the rabbitmq app"
    rabbit_ctl -q start_app >/dev/null 2>&1 || true
  fi
  rabbit_ctl -q await_startup --timeout "$WAIT_S" >/dev/null
}

start_redis() {
  if redis_up; then return 0; fi
  echo "services.sh: starting redis-server"
  as_root mkdir -p "$REDIS_DIR"
  as_root redis-server --daemonize yes --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$REDIS_DIR" \
    --save '' --appendonly no --logfile "$REDIS_DIR/redis-testbed.log" >/dev/null
  local deadline=$((SECONDS + WAIT_S))
  until redis_up; do
    if [ $SECONDS -ge $deadline ]; then echo "services.sh: redis did not start in ${WAIT_S}s" >&2; return 1; fi
    sleep 0.2
  done
}

start() {
  for cmd in rabbitmq-server redis-server; do
    have "$cmd" || { echo "services.sh: $cmd missing; run 'bash infra/services.sh install'" >&2; exit 1; }
  done
  start_rabbit
  enable_plugins   # a node installed before a plugin was added gets it here
  start_redis
  status
}

stop() {
  if rabbit_up; then echo "services.sh: stopping rabbitmq"; rabbit_ctl -q stop >/dev/null || true; fi
  if redis_up; then echo "services.sh: stopping redis"; redis-cli -p "$REDIS_PORT" shutdown nosave >/dev/null 2>&1 || true; fi
}

status() {
  local rc=0
  if rabbit_app_up; then echo "rabbitmq: running (amqp://127.0.0.1:5672, http://127.0.0.1:15672)"
  elif rabbit_up; then echo "rabbitmq: node up, app stopped"; rc=1
  else echo "rabbitmq: stopped"; rc=1; fi
  if redis_up; then echo "redis: running (127.0.0.1:$REDIS_PORT)"; else echo "redis: stopped"; rc=1; fi
  if have tesseract; then echo "tesseract: $(tesseract --version 2>&1 | head -n 1)"; else echo "tesseract: missing"; rc=1; fi
  return $rc
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: bash infra/services.sh install|start|stop|status" >&2; exit 2 ;;
esac
