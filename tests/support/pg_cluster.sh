#!/usr/bin/env bash
# A throw-away PostgreSQL for the tests: Debian's server binaries, run by initdb + pg_ctl in DIR on a
# free port of 127.0.0.1 (and a unix socket in DIR), never a system service.
#
#   pg_cluster.sh start DIR       creates and starts it; prints its URI (also written to DIR/uri)
#   pg_cluster.sh stop DIR        stops it (fast shutdown) and removes DIR
#   pg_cluster.sh halt DIR        stops the server but keeps DIR (data, port), for tests that take
#                                 the database away from under a store
#   pg_cluster.sh resume DIR      starts a halted server again, on the same port
#   pg_cluster.sh start-at FILE   start in a fresh `mktemp -d /tmp/berth-pg-XXXXXX`; writes that
#                                 directory to FILE and the URI to FILE.uri (a CTest fixture: the
#                                 tests find the server through FILE.uri)
#   pg_cluster.sh stop-at FILE    stops the cluster FILE names; removes it, FILE and FILE.uri
#
# PostgreSQL refuses to run as root: as root, the cluster belongs to and runs as `nobody`.
# Settings favour speed over crash safety of the *machine* (fsync off; BERTH_PG_FSYNC=on restores
# it, for benchmarks): the tests kill processes, not the kernel. The superuser is `berth`, with trust
# authentication on 127.0.0.1 only.
set -euo pipefail
usage="usage: pg_cluster.sh start|stop|halt|resume DIR, or start-at|stop-at FILE"
cmd=${1:?$usage}
dir=${2:?$usage}
self=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")

bindir=${BERTH_PG_BIN:-}
if [ -z "$bindir" ]; then
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    if [ -x "$d/initdb" ]; then bindir=$d; break; fi
  done
fi
if [ -z "$bindir" ] || [ ! -x "$bindir/pg_ctl" ]; then
  echo "pg_cluster.sh: no PostgreSQL server binaries (install Debian's postgresql package:" \
       "scripts/install-deps.sh --for-tests)" >&2
  exit 2
fi

as_owner=()
if [ "$(id -u)" -eq 0 ]; then as_owner=(setpriv --reuid=nobody --regid=nogroup --clear-groups --); fi

# Starts the server of the cluster in $dir on $port (start and resume).
start_server() {
  "${as_owner[@]}" "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=${BERTH_PG_FSYNC:-off} -c full_page_writes=${BERTH_PG_FSYNC:-off} -c max_connections=200" \
    start >/dev/null || { cat "$dir/server.log" >&2; exit 1; }
}

case "$cmd" in
  start)
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    if [ "$(id -u)" -eq 0 ]; then chown nobody:nogroup "$dir"; fi
    port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    "${as_owner[@]}" "$bindir/initdb" -D "$dir/data" -U berth --auth=trust -E UTF8 --no-locale \
      --no-sync >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; exit 1; }
    echo "$port" >"$dir/port"
    start_server
    echo "postgresql://berth@127.0.0.1:$port/postgres" | tee "$dir/uri"
    ;;
  halt)
    "${as_owner[@]}" "$bindir/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null
    ;;
  resume)
    dir=$(cd "$dir" && pwd)
    port=$(cat "$dir/port")
    start_server
    ;;
  start-at)
    file=$dir
    # A cluster left by an interrupted run (Ctrl-C skips the cleanup fixture) is stopped first, so
    # that runs do not pile up servers.
    if [ -f "$file" ]; then bash "$self" stop-at "$file" || true; fi
    dir=$(mktemp -d /tmp/berth-pg-XXXXXX)
    bash "$self" start "$dir" >/dev/null || { rm -rf "$dir"; exit 1; }
    echo "$dir" >"$file"
    cp "$dir/uri" "$file.uri"
    cat "$file.uri"
    ;;
  stop-at)
    file=$dir
    if [ -f "$file" ]; then
      dir=$(cat "$file")
      # Only ever a directory start-at made: FILE is a plain file that anyone could have edited.
      case "$dir" in
        /tmp/berth-pg-*) bash "$self" stop "$dir" ;;
        *) echo "pg_cluster.sh: $file names $dir, not a cluster of start-at; left alone" >&2 ;;
      esac
    fi
    rm -f "$file" "$file.uri"
    ;;
  stop)
    if [ -d "$dir/data" ]; then
      "${as_owner[@]}" "$bindir/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
    fi
    rm -rf "$dir"
    ;;
  *)
    echo "pg_cluster.sh: unknown command $cmd" >&2
    exit 2
    ;;
esac
