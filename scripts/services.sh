#!/usr/bin/env bash
# Start the local services the tests use, if they are not already up:
# PostgreSQL (127.0.0.1:5432), Redis (127.0.0.1:6379), RabbitMQ (127.0.0.1:5672).
# A service that is down and cannot be started here (no start command) is reported and
# skipped; one whose start command runs but which does not come up fails this script.
set -euo pipefail

port_open() { # host port
  (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null
}

wait_for() { # seconds description command...
  local seconds=$1 what=$2
  shift 2
  local i
  for ((i = 0; i < seconds * 2; i++)); do
    if "$@"; then
      return 0
    fi
    sleep 0.5
  done
  echo "error: $what did not come up within ${seconds}s" >&2
  return 1
}

postgres_up() { pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null || port_open 127.0.0.1 5432; }

ensure_postgres() {
  if postgres_up; then
    return 0
  fi
  if ! command -v pg_ctlcluster >/dev/null || [ ! -d /etc/postgresql ]; then
    echo "warning: PostgreSQL is not running on 127.0.0.1:5432 and cannot be started here" >&2
    return 0
  fi
  local version
  version="$(ls /etc/postgresql | sort -V | tail -n 1)"
  echo "==> starting PostgreSQL $version"
  pg_ctlcluster --skip-systemctl-redirect "$version" main start
  wait_for 30 PostgreSQL postgres_up
}

redis_up() { port_open 127.0.0.1 6379; }
rabbitmq_up() { port_open 127.0.0.1 5672; }

ensure_service() { # name port program seconds start-command...
  local name=$1 port=$2 program=$3 seconds=$4
  shift 4
  if port_open 127.0.0.1 "$port"; then
    return 0
  fi
  if ! command -v "$program" >/dev/null; then
    echo "warning: $name is not running on 127.0.0.1:$port and cannot be started here" >&2
    return 0
  fi
  echo "==> starting $name"
  "$@"
  wait_for "$seconds" "$name" port_open 127.0.0.1 "$port"
}

start_redis() {
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
}

ensure_postgres
ensure_service Redis 6379 redis-server 15 start_redis
ensure_service RabbitMQ 5672 rabbitmq-server 90 rabbitmq-server -detached
echo "==> services: PostgreSQL $(postgres_up && echo up || echo down)," \
  "Redis $(redis_up && echo up || echo down), RabbitMQ $(rabbitmq_up && echo up || echo down)"
