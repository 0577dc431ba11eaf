#!/usr/bin/env bash
# A pg_auto_failover formation on this machine, for the failover test: a monitor, a
# primary and a synchronous secondary, each its own PostgreSQL under DIR, on ports of its
# own (never the machine's server on 5432 nor its data directory).
#
#   bash scripts/failover_cluster.sh create DIR MONITOR_PORT PORT1 PORT2 [DBNAME]
#       creates the three nodes (about 40 s), waits until node1 is "primary" and node2
#       "secondary" (synchronous_standby_names set on the primary), shortens the monitor's
#       health-check timeouts (a failover in a few seconds, not the default 20-30 s), and
#       prints the application's connection string.
#   bash scripts/failover_cluster.sh state DIR      the monitor's view of the nodes
#   bash scripts/failover_cluster.sh kill DIR NODE  SIGKILL every process of NODE (node1 or
#       node2: its pg_autoctl, its postmaster and every PostgreSQL process), as if its
#       machine died
#   bash scripts/failover_cluster.sh destroy DIR    kill every node and remove DIR
#
# Needs Debian's postgresql-15-auto-failover and pg-auto-failover-cli (scripts/test.sh
# installs them). pg_autoctl refuses to run as root: as root, the nodes run as the
# postgres user. Each node runs in a process group of its own, noted in DIR/NODE.pgid.
set -euo pipefail

PG_BIN=${YIELDSTAR_FAULTS_PG_BIN:-/usr/lib/postgresql/15/bin}

# The command prefix that runs a pg_autoctl command (as postgres when we are root), with
# its configuration and state files under DIR.
prefix() {
  local dir=$1
  PREFIX=()
  if [ "$(id -u)" -eq 0 ]; then PREFIX=(runuser -u postgres --); fi
  PREFIX+=(env "XDG_CONFIG_HOME=$dir/config" "XDG_DATA_HOME=$dir/share"
    "XDG_RUNTIME_DIR=$dir/run" "PATH=$PG_BIN:/usr/bin:/bin" "PG_CONFIG=$PG_BIN/pg_config")
}

as_postgres() {
  local dir=$1
  shift
  prefix "$dir"
  "${PREFIX[@]}" "$@"
}

# Start "pg_autoctl ARGS" in a new session (its own process group) in the background.
spawn() {
  local dir=$1 name=$2
  shift 2
  prefix "$dir"
  setsid sh -c 'echo $$ >"$0"; exec "$@"' "$dir/$name.pgid" "${PREFIX[@]}" "$@" \
    >"$dir/$name.log" 2>&1 </dev/null &
}

state() {
  as_postgres "$1" pg_autoctl show state --pgdata "$1/monitor" 2>/dev/null
}

# Wait until node NAME reports the state the monitor assigned, STATE.
wait_state() {
  local dir=$1 name=$2 want=$3 timeout=$4
  local started=$SECONDS
  until state "$dir" | grep -Eq "^ *$name .*\| +$want +\| +$want *$"; do
    if [ $((SECONDS - started)) -ge "$timeout" ]; then
      echo "failover_cluster: $name did not reach $want in ${timeout}s" >&2
      state "$dir" >&2 || true
      tail -20 "$dir/$name.log" >&2 || true
      return 1
    fi
    sleep 0.5
  done
}

# psql_at PORT DBNAME SQL...: each SQL its own command (ALTER SYSTEM refuses a block).
psql_at() {
  local port=$1 db=$2 args=()
  shift 2
  for statement in "$@"; do args+=(-c "$statement"); done
  "$PG_BIN/psql" -qAtX -h 127.0.0.1 -U postgres -p "$port" -d "$db" "${args[@]}"
}

create() {
  local dir=$1 mport=$2 port1=$3 port2=$4 dbname=${5:-yieldstar_faults}
  mkdir -p "$dir"
  if [ "$(id -u)" -eq 0 ]; then chown postgres: "$dir"; fi
  local started=$SECONDS
  as_postgres "$dir" pg_autoctl create monitor --pgdata "$dir/monitor" --pgport "$mport" \
    --hostname 127.0.0.1 --auth trust --no-ssl >"$dir/monitor-create.log" 2>&1
  spawn "$dir" monitor pg_autoctl run --pgdata "$dir/monitor"
  local until=$((SECONDS + 30))
  until psql_at "$mport" pg_auto_failover "SELECT 1" >/dev/null 2>&1; do
    [ $SECONDS -lt $until ] || { echo "failover_cluster: the monitor did not start" >&2; return 1; }
    sleep 0.3
  done
  # A failover within seconds: the monitor probes every second, calls a node unhealthy
  # after 2 s without a report and a failed probe, and promotes the secondary 2 s after
  # asking an unreachable primary to step down.
  psql_at "$mport" pg_auto_failover \
    "ALTER SYSTEM SET pgautofailover.health_check_period = 1000" \
    "ALTER SYSTEM SET pgautofailover.health_check_timeout = 1000" \
    "ALTER SYSTEM SET pgautofailover.health_check_max_retries = 1" \
    "ALTER SYSTEM SET pgautofailover.health_check_retry_delay = 500" \
    "ALTER SYSTEM SET pgautofailover.node_considered_unhealthy_timeout = 2000" \
    "ALTER SYSTEM SET pgautofailover.primary_demote_timeout = 2000" \
    "SELECT pg_reload_conf()" >/dev/null
  local monitor="postgres://autoctl_node@127.0.0.1:$mport/pg_auto_failover?sslmode=disable"
  local node port
  for node in node1 node2; do
    port=$port1
    [ "$node" = node2 ] && port=$port2
    spawn "$dir" "$node" pg_autoctl create postgres --pgdata "$dir/$node" --pgport "$port" \
      --hostname 127.0.0.1 --listen 127.0.0.1 --name "$node" --auth trust --no-ssl \
      --dbname "$dbname" --monitor "$monitor" --pgctl "$PG_BIN/pg_ctl" --run
    if [ "$node" = node1 ]; then
      wait_state "$dir" node1 single 90
      # The standby's base backup waits for a checkpoint: not a spread one of minutes.
      psql_at "$port1" postgres "ALTER SYSTEM SET checkpoint_completion_target = 0" \
        "ALTER SYSTEM SET fsync = off" "SELECT pg_reload_conf()" >/dev/null
    fi
  done
  wait_state "$dir" node1 primary 120
  wait_state "$dir" node2 secondary 120
  local sync
  sync=$(psql_at "$port1" postgres "SHOW synchronous_standby_names")
  if [ -z "$sync" ]; then
    echo "failover_cluster: the primary replicates asynchronously" >&2
    return 1
  fi
  echo "failover_cluster: formation ready in $((SECONDS - started)) s (synchronous_standby_names: $sync)" >&2
  echo "host=127.0.0.1,127.0.0.1 port=$port1,$port2 user=postgres dbname=$dbname target_session_attrs=read-write"
}

kill_node() {
  local dir=$1 name=$2
  local pgid postmaster children=""
  pgid=$(cat "$dir/$name.pgid")
  # PostgreSQL's children (backends, walsender, checkpointer...) each run in a session of
  # their own: killed with the postmaster, not left to notice its death and say goodbye.
  if [ -f "$dir/$name/postmaster.pid" ]; then
    postmaster=$(head -1 "$dir/$name/postmaster.pid")
    children=$(ps -o pid= --ppid "$postmaster" || true)
  fi
  # shellcheck disable=SC2086  # one pid per word
  kill -KILL -- "-$pgid" $children 2>/dev/null || true
}

destroy() {
  local dir=$1 name
  for name in node1 node2 monitor; do
    if [ -f "$dir/$name.pgid" ]; then kill_node "$dir" "$name"; fi
  done
  rm -rf "$dir"
}

command=${1:-}
shift || true
case "$command" in
  create) create "$@" ;;
  state) state "$@" ;;
  kill) kill_node "$@" ;;
  destroy) destroy "$@" ;;
  *)
    echo "usage: $0 create DIR MONITOR_PORT PORT1 PORT2 [DBNAME] | state DIR | kill DIR NODE | destroy DIR" >&2
    exit 2
    ;;
esac
