#!/usr/bin/env bash
# The live testbed's local services: RabbitMQ (with the management plugin), Redis, tesseract
# (and the DejaVu font the production display images use).
#
#   bash infra/services.sh install   apt-get install what is missing; enable rabbitmq_management
#   bash infra/services.sh start     start RabbitMQ and Redis in the background unless running; wait until ready
#   bash infra/services.sh stop      stop what `start` started (RabbitMQ with the epmd it brought up, Redis)
#   bash infra/services.sh status    one line per service; exit 1 if one is down
#
# `install` and `start` record what they start in pid files (SERVICES_RUN_DIR, default /tmp:
# testbed-rabbitmq.pid, testbed-epmd.pid, testbed-redis.pid); `stop` stops only those: a broker, an
# epmd or a Redis that ran already (a system service, another project's) is left alone. What the script does (installing,
# starting, stopping) goes to stderr, one line per step and nothing when there is nothing to do; the
# services' status goes to stdout.
#
# Idempotent and non-interactive. Works without systemd (daemons are started directly), as root or
# through sudo. Endpoints: AMQP 127.0.0.1:5672 (guest/guest), management http://127.0.0.1:15672,
# Redis 127.0.0.1:6379.
set -euo pipefail
. "$(dirname "$0")/detach.sh"

WAIT_S=${SERVICES_WAIT_S:-120}
REDIS_PORT=${REDIS_PORT:-6379}
REDIS_DIR=${REDIS_DIR:-/var/lib/redis}
RUN_DIR=${SERVICES_RUN_DIR:-/tmp}
RABBIT_PIDFILE=$RUN_DIR/testbed-rabbitmq.pid
EPMD_PIDFILE=$RUN_DIR/testbed-epmd.pid
REDIS_PIDFILE=$RUN_DIR/testbed-redis.pid
REDIS_LOG=$REDIS_DIR/redis-testbed.log

say() { echo "services.sh: $*" >&2; }

# Every command runs detached from the file descriptors this script inherited: the broker, Redis and
# the epmd a RabbitMQ command brings up live on, and would hold a caller's lock or pipe open.
as_root() { detached _as_root "$@"; }
_as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo -n "$@"; else
    echo "services.sh: '$*' needs root (or sudo)" >&2; return 1; fi
}

have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ]; }

rabbit_ctl() { as_root rabbitmqctl "$@"; }

# epmd, the Erlang port mapper: every RabbitMQ command brings one up if none runs (the CLI tools are
# Erlang nodes, so even `install`'s status probe does), and so does the server. Whether one ran is
# noted before this script's first such command; one running afterwards is then ours (pid file), and
# `stop` stops it.
EPMD_BEFORE=1
note_epmd() { pgrep -x epmd >/dev/null || EPMD_BEFORE=0; }
record_epmd() {
  [ "$EPMD_BEFORE" = 0 ] || return 0
  alive_as "$(pid_in "$EPMD_PIDFILE")" epmd && return 0
  local pid; pid=$(pgrep -nx epmd) || return 0
  echo "$pid" >"$EPMD_PIDFILE"
}

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
    say "installing ${missing[*]} (Debian packages; first time: a minute or two)…"
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
PLUGINS_FILE=${RABBITMQ_ENABLED_PLUGINS_FILE:-/etc/rabbitmq/enabled_plugins}
enable_plugins() {
  local p
  for p in $PLUGINS; do
    grep -qs "$p" "$PLUGINS_FILE" && continue
    say "enabling the RabbitMQ plugin $p…"
    if rabbit_up; then as_root rabbitmq-plugins -q enable "$p" >/dev/null
    else as_root rabbitmq-plugins -q enable --offline "$p" >/dev/null; fi
  done
}

start_rabbit() {
  local deadline=$((SECONDS + WAIT_S))
  if ! rabbit_up; then
    say "starting RabbitMQ…"
    as_root rabbitmq-server -detached
    until rabbit_up; do
      if [ $SECONDS -ge $deadline ]; then echo "services.sh: rabbitmq did not start in ${WAIT_S}s" >&2; return 1; fi
      sleep 1
    done
    rabbit_ctl -q await_startup --timeout "$WAIT_S" >/dev/null   # the node boots its app
    rabbit_pid >"$RABBIT_PIDFILE"
  fi
  # a node whose app was stopped (rabbitmqctl stop_app) stays up without the broker: start it
  if ! rabbit_app_up; then
    say "starting the RabbitMQ app…"
    rabbit_ctl -q start_app >/dev/null 2>&1 || true
  fi
  rabbit_ctl -q await_startup --timeout "$WAIT_S" >/dev/null
}

start_redis() {
  if redis_up; then return 0; fi
  say "starting Redis…"
  as_root mkdir -p "$REDIS_DIR"
  as_root redis-server --daemonize yes --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$REDIS_DIR" \
    --save '' --appendonly no --logfile "$REDIS_LOG" --pidfile "$REDIS_PIDFILE" >/dev/null
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

# pid helpers: a process is ours while the pid in its file is alive under the expected name (an
# exited one whose parent has not collected it yet, a zombie, is not)
alive_as() {
  [ -n "${1:-}" ] && [ "$(cat "/proc/$1/comm" 2>/dev/null)" = "$2" ] && ! grep -qs '^State:[[:space:]]*Z' "/proc/$1/status"
}
pid_in() { [ -f "$1" ] && tr -dc 0-9 <"$1" || true; }
rabbit_pid() { rabbit_ctl -q eval 'os:getpid().' 2>/dev/null | tr -dc 0-9; }
redis_pid() { redis-cli -p "$REDIS_PORT" info server 2>/dev/null | sed -n 's/^process_id:\([0-9]*\).*/\1/p'; }
# the Redis on REDIS_PORT is ours: its pid is the one in our pid file, or (started before the pid
# file existed) it writes our log file
redis_is_ours() {
  local pid; pid=$(redis_pid)
  [ -n "$pid" ] || return 1
  [ "$(pid_in "$REDIS_PIDFILE")" = "$pid" ] && return 0
  [ "$(redis-cli -p "$REDIS_PORT" config get logfile 2>/dev/null | sed -n 2p)" = "$REDIS_LOG" ]
}
wait_gone() {  # pid, name: wait until the process has exited
  local deadline=$((SECONDS + WAIT_S))
  while alive_as "$1" "$2"; do
    if [ $SECONDS -ge $deadline ]; then say "$2 (pid $1) did not stop in ${WAIT_S}s"; return 1; fi
    sleep 0.2
  done
}

stop() {
  local pid epmd_pid
  pid=$(pid_in "$RABBIT_PIDFILE")
  if alive_as "$pid" beam.smp && [ "$(rabbit_pid)" = "$pid" ]; then
    say "stopping RabbitMQ (pid $pid)…"
    rabbit_ctl -q stop >/dev/null || true
    wait_gone "$pid" beam.smp
  elif rabbit_up; then
    say "RabbitMQ was not started by infra/services.sh: left running (rabbitmqctl stop stops it)"
  fi
  rm -f "$RABBIT_PIDFILE"
  epmd_pid=$(pid_in "$EPMD_PIDFILE")
  if alive_as "$epmd_pid" epmd; then
    # only once no Erlang node is registered with it any more
    if epmd -names 2>/dev/null | grep -q '^name '; then
      say "epmd (pid $epmd_pid) still serves other Erlang nodes: left running"
    else
      say "stopping epmd (pid $epmd_pid)…"
      as_root kill "$epmd_pid" 2>/dev/null || true
      wait_gone "$epmd_pid" epmd
      rm -f "$EPMD_PIDFILE"
    fi
  else
    rm -f "$EPMD_PIDFILE"
  fi
  if redis_is_ours; then
    pid=$(redis_pid)
    say "stopping Redis (pid $pid)…"
    redis-cli -p "$REDIS_PORT" shutdown nosave >/dev/null 2>&1 || true
    wait_gone "$pid" redis-server
  elif redis_up; then
    say "the Redis on port $REDIS_PORT was not started by infra/services.sh: left running"
  fi
  if ! alive_as "$(pid_in "$REDIS_PIDFILE")" redis-server; then as_root rm -f "$REDIS_PIDFILE"; fi
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
  # an epmd that came up meanwhile is recorded however the step ends
  install) note_epmd; trap record_epmd EXIT; install ;;
  start) note_epmd; trap record_epmd EXIT; start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: bash infra/services.sh install|start|stop|status" >&2; exit 2 ;;
esac
