#!/usr/bin/env bash
# The live testbed's services (RabbitMQ + management, Redis, Kafka) with Docker Compose instead of
# the host-installed Debian packages of infra/services.sh: `make infra-up INFRA=compose`.
#
#   bash infra/compose.sh up       start dockerd if needed, `compose up -d`, wait until every service is healthy
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
  case ${1:-}:$BASE in up:testbed-base:*) bash infra/base-image.sh "$BASE" ;; esac
fi
# the project name (volume and network names) does not depend on the checkout's folder name
export COMPOSE_PROJECT_NAME=${COMPOSE_PROJECT_NAME:-testbed}

wait_healthy() {  # every service's healthcheck passes (a published port alone says nothing: Docker's
                  # proxy accepts connections before the service listens)
  local deadline=$((SECONDS + WAIT_S)) svc id state
  for svc in rabbitmq redis kafka; do
    id=$("${compose[@]}" "${files[@]}" ps -q "$svc")
    [ -n "$id" ] || { echo "compose.sh: service $svc has no container" >&2; return 1; }
    until state=$(docker inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{else}}{{.State.Status}}{{end}}' "$id") \
          && [ "$state" = healthy ]; do
      if [ "$state" = exited ] || [ "$state" = unhealthy ] || [ $SECONDS -ge $deadline ]; then
        echo "compose.sh: $svc is $state after $((SECONDS)) s; its log:" >&2
        docker logs --tail 30 "$id" >&2 || true
        return 1
      fi
      sleep 1
    done
  done
}

case "${1:-}" in
  up)
    if [ "${COMPOSE_BUILD:-0}" = 1 ]; then "${compose[@]}" "${files[@]}" up -d --build
    else "${compose[@]}" "${files[@]}" up -d; fi
    wait_healthy
    echo "compose.sh: amqp://${RABBITMQ_DEFAULT_USER:-guest}:***@127.0.0.1:${RABBITMQ_PORT:-5672}/%2F," \
         "http://127.0.0.1:${RABBITMQ_MANAGEMENT_PORT:-15672}, redis://127.0.0.1:${REDIS_PORT:-6379}," \
         "kafka 127.0.0.1:${KAFKA_PORT:-9092}" ;;
  down) "${compose[@]}" "${files[@]}" down ;;
  status) "${compose[@]}" "${files[@]}" ps ;;
  *) echo "usage: bash infra/compose.sh up|down|status" >&2; exit 2 ;;
esac
