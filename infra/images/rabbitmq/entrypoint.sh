#!/bin/sh
# Write the broker's config from the environment (as the official image does), then run the broker
# in the foreground as the unprivileged user `rabbitmq`.
set -eu
cat >"$RABBITMQ_CONFIG_FILE" <<CONF
listeners.tcp.default = 5672
management.tcp.port = 15672
# clients come through Docker's port mapping, not loopback: let the default user in from anywhere
loopback_users = none
default_user = ${RABBITMQ_DEFAULT_USER:-guest}
default_pass = ${RABBITMQ_DEFAULT_PASS:-guest}
default_vhost = ${RABBITMQ_DEFAULT_VHOST:-/}
CONF
exec /usr/lib/rabbitmq/bin/rabbitmq-server "$@"
