#!/usr/bin/env bash
# Apache Flink for the job mode on a real engine: a Flink home installed from PyPI into the project,
# the project's WordCount job built against it, and a demonstration cluster.
#
#   bash infra/flink.sh install   Flink 2.3.0 from PyPI into FLINK_DIR (default .flink/ in the project)
#   bash infra/flink.sh build     compile the jobs (flink/jobs/*/src: WordCount, YSB, Traffic Monitoring and
#                                 their shared parts) into one jar in FLINK_DIR/build/
#   bash infra/flink.sh start     install, build, then one application cluster: the job at a constant
#                                 rate (FLINK_RATE, 100 records/s) and FLINK_TASKMANAGERS (1) TaskManagers
#   bash infra/flink.sh stop      stop what `start` started (pid files in FLINK_DIR/run/)
#   bash infra/flink.sh status    installed version, job jar, and the processes `start` started
#
# Why --no-deps --target: the wheels `apache-flink` (bin/, conf/) and `apache-flink-libraries` (lib/,
# opt/, plugins/) together are a complete Flink home. PyFlink's own dependencies (pandas, pyarrow,
# apache-beam at pinned versions) are only needed to run Python UDFs; the job here is Java, and
# installing them into the project's venv would move its pandas and pyarrow. So the two wheels go,
# without dependencies, into a directory of their own, and nothing else sees them.
#
# Idempotent; steps go to stderr, one line each (nothing when there is nothing to do); status to
# stdout. Clusters for experiments and tests are started by testbed/flink/cluster.py, not by `start`.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
FLINK_VERSION=2.3.0
FLINK_DIR=${FLINK_DIR:-$ROOT/.flink}
PKG_DIR=$FLINK_DIR/pypi-$FLINK_VERSION
FLINK_HOME=$PKG_DIR/pyflink
BUILD_DIR=$FLINK_DIR/build
JOB_SRC=$ROOT/flink/jobs
JOB_JAR=$BUILD_DIR/testbed-wordcount.jar
RUN_DIR=$FLINK_DIR/run
PIP=${PIP:-}

say() { echo "flink.sh: $*" >&2; }

pip_cmd() {
  if [ -n "$PIP" ]; then echo "$PIP"; elif [ -x "$ROOT/.venv/bin/pip" ]; then echo "$ROOT/.venv/bin/pip";
  else echo "python3 -m pip"; fi
}

# Java 17 with javac and jar: Debian's JDK, installed when missing (the machine may be new)
jdk() {
  command -v javac >/dev/null && command -v jar >/dev/null && command -v java >/dev/null && return 0
  say "installing Debian's openjdk-17-jdk-headless (javac, jar)…"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jdk-headless >/dev/null
}

installed() { [ -f "$PKG_DIR/.complete" ] && [ -x "$FLINK_HOME/bin/standalone-job.sh" ]; }

install() {
  installed && return 0
  jdk
  say "installing apache-flink $FLINK_VERSION and apache-flink-libraries $FLINK_VERSION from PyPI into $PKG_DIR (about 330 MB)…"
  rm -rf "$PKG_DIR.partial"
  $(pip_cmd) install --quiet --no-deps --no-compile --target "$PKG_DIR.partial" \
    "apache-flink==$FLINK_VERSION" "apache-flink-libraries==$FLINK_VERSION"
  chmod +x "$PKG_DIR.partial/pyflink/bin/"*
  rm -rf "$PKG_DIR" && mv "$PKG_DIR.partial" "$PKG_DIR"
  touch "$PKG_DIR/.complete"
}

# The job jar is rebuilt when a source is newer than it (or it is missing).
build() {
  install
  local sources
  sources=$(find "$JOB_SRC" -path '*/src/*' -name '*.java' | sort)
  if [ -f "$JOB_JAR" ] && [ -z "$(find "$JOB_SRC" -path '*/src/*' -name '*.java' -newer "$JOB_JAR")" ]; then return 0; fi
  jdk
  say "building the jobs ($JOB_JAR)…"
  rm -rf "$BUILD_DIR/classes" && mkdir -p "$BUILD_DIR/classes"
  # shellcheck disable=SC2086
  javac --release 17 -nowarn -d "$BUILD_DIR/classes" -cp "$FLINK_HOME/lib/*" $sources
  jar --create --file "$JOB_JAR.tmp" -C "$BUILD_DIR/classes" .
  mv "$JOB_JAR.tmp" "$JOB_JAR"
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# A demonstration cluster with Flink's own daemon scripts: their pid files go to RUN_DIR, so `stop`
# stops exactly these processes.
flink_env() { export FLINK_CONF_DIR=$RUN_DIR/conf FLINK_LOG_DIR=$RUN_DIR/log FLINK_PID_DIR=$RUN_DIR; }

write_conf() {
  mkdir -p "$RUN_DIR/conf" "$RUN_DIR/log"
  cp "$FLINK_HOME/conf/"log4j*.properties "$FLINK_HOME/conf/"logback*.xml "$RUN_DIR/conf/"
  { sed -n '/^env:/,/^jobmanager:/p' "$FLINK_HOME/conf/config.yaml" | sed '$d'
    cat <<YAML
jobmanager.rpc.address: localhost
jobmanager.rpc.port: $(free_port)
jobmanager.bind-host: localhost
taskmanager.host: localhost
taskmanager.bind-host: localhost
rest.address: localhost
rest.bind-address: localhost
rest.port: ${FLINK_REST_PORT:-8081}
jobmanager.memory.process.size: 640m
taskmanager.memory.process.size: 768m
taskmanager.numberOfTaskSlots: 1
taskmanager.memory.managed.size: 0m
taskmanager.memory.jvm-metaspace.size: 160m
taskmanager.memory.jvm-overhead.min: 128m
scheduler-mode: reactive
execution.checkpointing.interval: 2 s
execution.checkpointing.dir: file://$RUN_DIR/checkpoints
user.artifacts.base-dir: $RUN_DIR/artifacts
metrics.reporter.prom.factory.class: org.apache.flink.metrics.prometheus.PrometheusReporterFactory
metrics.reporter.prom.port: 9250-9299
YAML
  } >"$RUN_DIR/conf/config.yaml"
  printf '0 %s\n' "${FLINK_RATE:-100}" >"$RUN_DIR/schedule.txt"
}

running_pids() { cat "$RUN_DIR"/*.pid 2>/dev/null | while read -r pid; do kill -0 "$pid" 2>/dev/null && echo "$pid"; done; true; }

start() {
  build
  if [ -n "$(running_pids)" ]; then echo "flink cluster running (pids $(running_pids | xargs))"; return 0; fi
  rm -rf "$RUN_DIR" && write_conf
  flink_env
  say "starting the JobManager (WordCount at ${FLINK_RATE:-100} records/s; REST on port ${FLINK_REST_PORT:-8081})…"
  # --jars takes every argument up to the next option: it goes before --job-classname
  "$FLINK_HOME/bin/standalone-job.sh" start --jars "$JOB_JAR" \
    --job-classname testbed.flink.wordcount.WordCountJob --schedule "$RUN_DIR/schedule.txt" >/dev/null
  for _ in $(seq 1 "${FLINK_TASKMANAGERS:-1}"); do
    say "starting a TaskManager…"
    "$FLINK_HOME/bin/taskmanager.sh" start >/dev/null
  done
  echo "flink cluster started: http://localhost:${FLINK_REST_PORT:-8081} (logs in $RUN_DIR/log)"
}

stop() {
  [ -n "$(running_pids)" ] || return 0
  flink_env
  say "stopping the TaskManagers and the JobManager started by infra/flink.sh…"
  "$FLINK_HOME/bin/taskmanager.sh" stop-all >/dev/null 2>&1 || true
  "$FLINK_HOME/bin/standalone-job.sh" stop >/dev/null 2>&1 || true
  for _ in $(seq 1 30); do [ -z "$(running_pids)" ] && return 0; sleep 1; done
  say "still running after 30 s, killing: $(running_pids | xargs)"
  running_pids | xargs -r kill -KILL
}

status() {
  if installed; then echo "flink $FLINK_VERSION installed: $FLINK_HOME"; else echo "flink not installed"; exit 1; fi
  if [ -f "$JOB_JAR" ]; then echo "job jar: $JOB_JAR"; else echo "job jar not built"; fi
  if [ -n "$(running_pids)" ]; then echo "cluster running (pids $(running_pids | xargs))"; else echo "no cluster running"; fi
}

case "${1:-status}" in
  install) install ;;
  build) build ;;
  start) start ;;
  stop) stop ;;
  status) status ;;
  home) echo "$FLINK_HOME" ;;
  *) echo "usage: $0 install|build|start|stop|status|home" >&2; exit 2 ;;
esac
