#!/usr/bin/env bash
# Three `tierkv serve` shards behind twemproxy (Debian's `nutcracker`), all on loopback:
# shards on 127.0.0.1:PORT+1..PORT+3, the proxy on 127.0.0.1:PORT (default 22121, its stats
# on PORT+10),
# keys distributed by fnv1a_64 + ketama (consistent hashing). Runs until Ctrl-C / SIGTERM,
# then stops the proxy and the shards (SIGTERM: they close their stores) and exits.
#
#   scripts/twemproxy.sh [DIR] [ENGINE] [PORT]
#     DIR      data directory; shard i keeps its store in DIR/shard-i (default: a temp dir,
#              removed at exit)
#     ENGINE   engine spec of the shards (default dram:btree)
#     PORT     the proxy's port (default 22121)
#   env: TIERKV=path of the tierkv binary (default target/release/tierkv),
#        TIERKV_SERVE=the serve command instead (e.g. the crate's tierkv-server binary),
#        NUTCRACKER=path of nutcracker (default: from PATH, else /usr/sbin/nutcracker).
#
# It prints "twemproxy ready on 127.0.0.1:PORT" when every shard and the proxy accept
# clients. Install the proxy with `apt-get install nutcracker`.
set -euo pipefail
here=$(cd "$(dirname "$0")/../../.." && pwd)
tierkv=${TIERKV:-$here/target/release/tierkv}
nutcracker=${NUTCRACKER:-$(command -v nutcracker || echo /usr/sbin/nutcracker)}
# shellcheck disable=SC2206
serve=(${TIERKV_SERVE:-$tierkv serve})
engine=${2:-dram:btree}
port=${3:-22121}
if [ -n "${1:-}" ]; then dir=$1; keep=1; else dir=$(mktemp -d /tmp/tierkv-twem.XXXXXX); keep=0; fi
mkdir -p "$dir"
pids=()
stop() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    pids=()
    [ "$keep" = 1 ] || rm -rf "$dir"
}
trap stop EXIT
trap 'exit 0' INT TERM

wait_port() {
    for _ in $(seq 200); do
        (echo > "/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.05
    done
    echo "nothing listens on port $1" >&2
    exit 1
}

servers=""
for i in 1 2 3; do
    p=$((port + i))
    "${serve[@]}" --dir "$dir/shard-$i" --engine "$engine" --bind "127.0.0.1:$p" \
        2>>"$dir/shard-$i.log" &
    pids+=($!)
    servers+="    - 127.0.0.1:$p:1 shard$i"$'\n'
done
cat > "$dir/nutcracker.yml" <<YML
tierkv:
  listen: 127.0.0.1:$port
  hash: fnv1a_64
  distribution: ketama
  redis: true
  auto_eject_hosts: false
  server_connections: 1
  timeout: 5000
  servers:
$servers
YML
for i in 1 2 3; do wait_port $((port + i)); done
"$nutcracker" -c "$dir/nutcracker.yml" -a 127.0.0.1 -s $((port + 10)) -o "$dir/nutcracker.log" &
pids+=($!)
wait_port "$port"
echo "twemproxy ready on 127.0.0.1:$port (shards on ports $((port + 1))-$((port + 3)), data in $dir)"
wait
