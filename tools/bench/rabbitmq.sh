#!/usr/bin/env bash
# A throw-away RabbitMQ for side-by-side benchmarks (tidemark-bench --vs).
#
#   tools/bench/rabbitmq.sh start [DIR]   install (apt) if missing, start on loopback, declare queues
#   tools/bench/rabbitmq.sh stop  [DIR]   stop the node started from DIR (by its PID)
#   tools/bench/rabbitmq.sh env   [DIR]   print the URL/addresses of a running node again
#
# Everything lives under DIR (default /tmp/tidemark-rabbitmq): config, mnesia, logs, Erlang
# cookie, PID file. The node binds 127.0.0.1 only: AMQP on $RMQ_PORT (default 5682),
# management HTTP on $RMQ_MGMT_PORT (15682), Erlang distribution on $RMQ_DIST_PORT (25682),
# its own epmd on $RMQ_EPMD_PORT (4370), so it does not clash with a system RabbitMQ.
#
# Queues declared (durable): bench-quorum (x-queue-type=quorum) and bench-classic.
# Address forms (RabbitMQ 3.x AMQP 1.0 plugin, "v1" addresses):
#   consume from an existing queue:   /amq/queue/NAME
#   publish to an existing queue:     /amq/queue/NAME  (default exchange, routing key NAME)
#   (/queue/NAME also works but DECLARES a classic queue if it is missing: never use it for
#    the quorum queue; /exchange/X/KEY publishes through exchange X.)
# RabbitMQ 4.x: AMQP 1.0 is built in and uses "v2" addresses: /queue/NAME for both.
set -euo pipefail

CMD=${1:-start}
DIR=${2:-${RMQ_DIR:-/tmp/tidemark-rabbitmq}}
PORT=${RMQ_PORT:-5682}
MGMT_PORT=${RMQ_MGMT_PORT:-15682}
DIST_PORT=${RMQ_DIST_PORT:-25682}
EPMD_PORT=${RMQ_EPMD_PORT:-4370}
NODE=${RMQ_NODENAME:-tmbench@localhost}

rmq_env() {
  export HOME="$DIR/home"                       # Erlang cookie lives here, shared with rabbitmqctl
  export RABBITMQ_NODENAME="$NODE"
  export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
  export RABBITMQ_NODE_PORT="$PORT"
  export RABBITMQ_DIST_PORT="$DIST_PORT"
  export ERL_EPMD_ADDRESS=127.0.0.1
  export ERL_EPMD_PORT="$EPMD_PORT"
  export RABBITMQ_CONFIG_FILE="$DIR/rabbitmq.conf"
  export RABBITMQ_ENABLED_PLUGINS_FILE="$DIR/enabled_plugins"
  export RABBITMQ_MNESIA_BASE="$DIR/mnesia"
  export RABBITMQ_LOG_BASE="$DIR/log"
  export RABBITMQ_PID_FILE="$DIR/rabbitmq.pid"
  export RABBITMQ_CONF_ENV_FILE="$DIR/rabbitmq-env.conf"
  # Erlang distribution (node and the CLI's own hidden node) on loopback only
  export RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
  export RABBITMQ_CTL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
}

# The versioned scripts run the node directly; /usr/sbin/rabbitmq-* would su to the
# 'rabbitmq' user, which cannot read a temp dir owned by us.
rmq_bin() {
  local d
  d=$(ls -d /usr/lib/rabbitmq/lib/rabbitmq_server-*/sbin 2>/dev/null | sort -V | tail -1)
  [ -n "$d" ] || return 1
  echo "$d"
}

version() { basename "$(dirname "$(rmq_bin)")" | sed 's/rabbitmq_server-//'; }

print_env() {
  local v major
  v=$(version); major=${v%%.*}
  echo "RABBITMQ_VERSION=$v"
  echo "RABBITMQ_URL=amqp://guest:guest@127.0.0.1:$PORT"
  if [ "$major" -ge 4 ]; then
    echo "RABBITMQ_QUORUM_ADDRESS=/queue/bench-quorum"
    echo "RABBITMQ_CLASSIC_ADDRESS=/queue/bench-classic"
  else
    echo "RABBITMQ_QUORUM_ADDRESS=/amq/queue/bench-quorum"
    echo "RABBITMQ_CLASSIC_ADDRESS=/amq/queue/bench-classic"
  fi
  echo "RABBITMQ_PID=$(cat "$DIR/rabbitmq.pid" 2>/dev/null || echo '?')"
  echo "RABBITMQ_MGMT=http://127.0.0.1:$MGMT_PORT (guest/guest)"
}

declare_queue() { # name type
  local body
  if [ "$2" = quorum ]; then body='{"durable":true,"arguments":{"x-queue-type":"quorum"}}'
  else body='{"durable":true,"arguments":{"x-queue-type":"classic"}}'; fi
  curl -fsS -u guest:guest -X PUT -H 'content-type: application/json' \
    "http://127.0.0.1:$MGMT_PORT/api/queues/%2F/$1" -d "$body" >/dev/null
}

start() {
  if ! rmq_bin >/dev/null; then
    echo "installing rabbitmq-server from the system package manager" >&2
    # RUNLEVEL=1: the package's postinst must not start the system-wide service
    DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 apt-get install -y rabbitmq-server >&2
  fi
  command -v curl >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y curl >&2
  local bin v major
  bin=$(rmq_bin); v=$(version); major=${v%%.*}
  if [ -f "$DIR/rabbitmq.pid" ] && kill -0 "$(cat "$DIR/rabbitmq.pid")" 2>/dev/null; then
    echo "already running (pid $(cat "$DIR/rabbitmq.pid"))" >&2; print_env; return 0
  fi
  mkdir -p "$DIR/home" "$DIR/mnesia" "$DIR/log"
  chmod 700 "$DIR/home"
  [ -f "$DIR/home/.erlang.cookie" ] || { head -c 24 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' > "$DIR/home/.erlang.cookie"; chmod 400 "$DIR/home/.erlang.cookie"; }
  cat > "$DIR/rabbitmq.conf" <<CONF
listeners.tcp.1 = 127.0.0.1:$PORT
loopback_users.guest = true
management.tcp.ip = 127.0.0.1
management.tcp.port = $MGMT_PORT
CONF
  if [ "$major" -ge 4 ]; then echo '[rabbitmq_management].' > "$DIR/enabled_plugins"
  else echo '[rabbitmq_amqp1_0,rabbitmq_management].' > "$DIR/enabled_plugins"; fi
  : > "$DIR/rabbitmq-env.conf"
  rmq_env
  # its own epmd, loopback only (ERL_EPMD_ADDRESS/PORT)
  epmd -daemon
  "$bin/rabbitmq-server" > "$DIR/log/stdout.log" 2>&1 &
  local launcher=$!
  echo "$launcher" > "$DIR/launcher.pid"
  # wait for the node (pid file + boot complete)
  if ! "$bin/rabbitmqctl" -n "$NODE" wait --timeout 120 "$DIR/rabbitmq.pid" >&2; then
    echo "RabbitMQ did not start; see $DIR/log" >&2; tail -30 "$DIR/log/stdout.log" >&2; exit 1
  fi
  for _ in $(seq 1 60); do curl -fsS -u guest:guest "http://127.0.0.1:$MGMT_PORT/api/overview" >/dev/null 2>&1 && break; sleep 1; done
  declare_queue bench-quorum quorum
  declare_queue bench-classic classic
  print_env
}

stop() {
  rmq_env
  local bin pid
  bin=$(rmq_bin)
  pid=$(cat "$DIR/rabbitmq.pid" 2>/dev/null || true)
  if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then echo "not running" >&2; else
    "$bin/rabbitmqctl" -n "$NODE" stop "$DIR/rabbitmq.pid" >&2 || kill "$pid"
    for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
  fi
  # the epmd we started on our own port
  epmd -port "$EPMD_PORT" -kill >/dev/null 2>&1 || true
  echo "stopped" >&2
}

case "$CMD" in
  start) start ;;
  stop) stop ;;
  env) print_env ;;
  *) echo "usage: $0 start|stop|env [DIR]" >&2; exit 2 ;;
esac
