#!/usr/bin/env bash
# Debian's PgBouncer in transaction mode in front of the local PostgreSQL, for the suites
# that run through a transaction pooler (scripts/test.sh):
#
#   bash scripts/pgbouncer.sh start RUN_DIR   # writes RUN_DIR/pgbouncer.ini, starts it
#   bash scripts/pgbouncer.sh stop RUN_DIR    # stops the one RUN_DIR/pgbouncer.pid names
#
# It listens on 127.0.0.1:${PGBOUNCER_PORT:-6432} and sends every database to
# ${PGBOUNCER_UPSTREAM_HOST:-127.0.0.1}:${PGBOUNCER_UPSTREAM_PORT:-5432} as user
# ${PGBOUNCER_UPSTREAM_USER:-postgres}, with no authentication of its clients
# (auth_type any): a test setup, not a production one. PostgreSQL itself is left alone.
# Its config, pid file and log stay in RUN_DIR; as root it runs as user postgres
# (PgBouncer refuses to run as root).
set -euo pipefail

action=${1:?usage: pgbouncer.sh start|stop RUN_DIR}
run_dir=${2:?usage: pgbouncer.sh start|stop RUN_DIR}
port=${PGBOUNCER_PORT:-6432}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

program() {
  local candidate
  for candidate in pgbouncer /usr/sbin/pgbouncer; do
    if command -v "$candidate" >/dev/null; then
      echo "$candidate"
      return 0
    fi
  done
  echo "error: pgbouncer is not installed (apt-get install pgbouncer)" >&2
  return 1
}

start() {
  local bin
  bin="$(program)"
  if port_open "$port"; then
    echo "error: 127.0.0.1:$port is taken already; set PGBOUNCER_PORT" >&2
    return 1
  fi
  mkdir -p "$run_dir"
  local as_user=""
  if [ "$(id -u)" -eq 0 ]; then
    as_user="user = postgres"
    chown postgres "$run_dir"
  fi
  cat >"$run_dir/pgbouncer.ini" <<EOF
[databases]
* = host=${PGBOUNCER_UPSTREAM_HOST:-127.0.0.1} port=${PGBOUNCER_UPSTREAM_PORT:-5432} user=${PGBOUNCER_UPSTREAM_USER:-postgres}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = any
pool_mode = transaction
; Server connections per database: the suites' races hold up to about a dozen
; transactions open at once on one test database.
default_pool_size = 20
max_client_conn = 400
; Django's test runner drops the test databases at the end: hold no idle server
; connection to them for long.
server_idle_timeout = 5
ignore_startup_parameters = extra_float_digits
pidfile = $run_dir/pgbouncer.pid
logfile = $run_dir/pgbouncer.log
$as_user
EOF
  "$bin" -d "$run_dir/pgbouncer.ini"
  local i
  for ((i = 0; i < 40; i++)); do
    if port_open "$port"; then
      echo "==> PgBouncer $("$bin" --version | head -n 1 | awk '{print $2}') (transaction mode) on 127.0.0.1:$port, pid $(cat "$run_dir/pgbouncer.pid")"
      return 0
    fi
    sleep 0.25
  done
  echo "error: PgBouncer did not come up; its log:" >&2
  cat "$run_dir/pgbouncer.log" >&2 || true
  return 1
}

stop() {
  local pidfile="$run_dir/pgbouncer.pid" pid
  [ -f "$pidfile" ] || return 0
  pid="$(cat "$pidfile")"
  kill "$pid" 2>/dev/null || true
  local i
  for ((i = 0; i < 40; i++)); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.25
  done
  echo "warning: PgBouncer (pid $pid) did not stop" >&2
}

case "$action" in
  start) start ;;
  stop) stop ;;
  *)
    echo "usage: pgbouncer.sh start|stop RUN_DIR" >&2
    exit 2
    ;;
esac
