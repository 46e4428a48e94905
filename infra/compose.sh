#!/usr/bin/env bash
# The live testbed's services (RabbitMQ + management, Redis, Kafka) with Docker Compose instead of
# the host-installed Debian packages of infra/services.sh: `make infra-up INFRA=compose`.
#
#   bash infra/compose.sh up       start dockerd if needed, `compose up -d`, wait until the ports answer
#   bash infra/compose.sh down     `compose down` (keeps the RabbitMQ volume; add -v by hand to drop it)
#   bash infra/compose.sh status   `compose ps`
#
# Uses `docker compose` (plugin) or `docker-compose` (Debian's package, installed here if neither
# exists). COMPOSE_BUILD=1 adds docker-compose.build.yml: every service is built from BASE
# (default python:3.11-slim; testbed-base:bookworm is made by infra/base-image.sh when named)
# instead of pulled. Ports, bind address and credentials: see docker-compose.yml.
set -euo pipefail
cd "$(dirname "$0")/.."
WAIT_S=${COMPOSE_WAIT_S:-180}

bash infra/docker.sh start >/dev/null
if docker compose version >/dev/null 2>&1; then compose=(docker compose)
else
  if ! command -v docker-compose >/dev/null; then
    echo "compose.sh: installing Debian's docker-compose"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-compose >/dev/null
  fi
  compose=(docker-compose)
fi
files=(-f docker-compose.yml)
if [ "${COMPOSE_BUILD:-0}" = 1 ]; then
  files+=(-f docker-compose.build.yml)
  export BASE=${BASE:-python:3.11-slim}
  case $BASE in testbed-base:*) bash infra/base-image.sh "$BASE" ;; esac
fi
# the project name (volume and network names) does not depend on the checkout's folder name
export COMPOSE_PROJECT_NAME=${COMPOSE_PROJECT_NAME:-testbed}

wait_port() {  # name port
  local deadline=$((SECONDS + WAIT_S))
  until (exec 3<>"/dev/tcp/${BIND_ADDRESS:-127.0.0.1}/$2") 2>/dev/null; do
    if [ $SECONDS -ge $deadline ]; then echo "compose.sh: $1 not answering on port $2 after ${WAIT_S}s" >&2; return 1; fi
    sleep 1
  done
}

case "${1:-}" in
  up)
    if [ "${COMPOSE_BUILD:-0}" = 1 ]; then "${compose[@]}" "${files[@]}" up -d --build
    else "${compose[@]}" "${files[@]}" up -d; fi
    wait_port rabbitmq "${RABBITMQ_PORT:-5672}"
    wait_port "rabbitmq management" "${RABBITMQ_MANAGEMENT_PORT:-15672}"
    wait_port redis "${REDIS_PORT:-6379}"
    wait_port kafka "${KAFKA_PORT:-9092}"
    echo "compose.sh: amqp://${RABBITMQ_DEFAULT_USER:-guest}:***@127.0.0.1:${RABBITMQ_PORT:-5672}/%2F," \
         "http://127.0.0.1:${RABBITMQ_MANAGEMENT_PORT:-15672}, redis://127.0.0.1:${REDIS_PORT:-6379}," \
         "kafka 127.0.0.1:${KAFKA_PORT:-9092}" ;;
  down) "${compose[@]}" "${files[@]}" down ;;
  status) "${compose[@]}" "${files[@]}" ps ;;
  *) echo "usage: bash infra/compose.sh up|down|status" >&2; exit 2 ;;
esac
