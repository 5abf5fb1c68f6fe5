#!/usr/bin/env bash
# Back-to-back redis-benchmark rounds of `tierkv serve` beside Debian's redis-server on
# this machine, alternating the two servers (the machine is shared and noisy: a ratio
# means something only between runs close in time). Prints one CSV line per test and
# server per round, then the ratios of each round.
#
#   scripts/bench.sh [ROUNDS] [TESTS] [ENGINE]
#     ROUNDS   alternations (default 3)
#     TESTS    redis-benchmark -t list (default the issue's: set,get,incr,lpush,rpop,sadd,hset,zadd,lrange_100)
#     ENGINE   tierkv engine spec (default dram:hash)
#   env: TIERKV=path of the tierkv binary (default target/release/tierkv),
#        N=requests (200000), C=clients (50), P=pipeline (16),
#        REDIS_ARGS="redis-server flags" (default: --appendonly no; --save "" always added),
#        TIERKV_ARGS="extra serve flags" (e.g. "--pmem-path /dev/shm/x --pmem-mode msync";
#        a pmem pool outside the data directory is not removed between rounds: run one
#        round per fresh pool directory).
#
# Build first: cargo build --release -p tierkv-cli. Listens on loopback ports 6390/6402 only.
set -euo pipefail
rounds=${1:-3}
tests=${2:-set,get,incr,lpush,rpop,sadd,hset,zadd,lrange_100}
engine=${3:-dram:hash}
here=$(cd "$(dirname "$0")/../../.." && pwd)
tierkv=${TIERKV:-$here/target/release/tierkv}
n=${N:-200000} c=${C:-50} p=${P:-16}
# shellcheck disable=SC2206
redis_args=(${REDIS_ARGS:---appendonly no} --save "")
work=$(mktemp -d /tmp/tierkv-bench.XXXXXX)
cur=""
cleanup() {
    if [ -n "$cur" ]; then kill "$cur" 2>/dev/null || true; wait "$cur" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

wait_port() {
    for _ in $(seq 100); do
        redis-cli -p "$1" ping >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    echo "server on port $1 did not start" >&2
    return 1
}

run_one() { # name port
    timeout 300 redis-benchmark -p "$2" -t "$tests" -n "$n" -c "$c" -P "$p" -q --csv 2>/dev/null |
        sed 1d | tr -d '"' | awk -F, -v who="$1" -v r="$round" '{print r "," who "," $1 "," $2}'
}

results=$work/results.csv
for round in $(seq "$rounds"); do
    for who in redis tierkv; do
        if [ "$who" = redis ]; then
            redis-server --port 6390 --bind 127.0.0.1 --dir "$work" "${redis_args[@]}" \
                >/dev/null 2>&1 &
            pid=$!; port=6390
        else
            rm -rf "$work/data"
            # shellcheck disable=SC2086
            "$tierkv" serve --dir "$work/data" --engine "$engine" --bind 127.0.0.1:6402 \
                ${TIERKV_ARGS:-} 2>/dev/null &
            pid=$!; port=6402
        fi
        cur=$pid
        wait_port "$port"
        run_one "$who" "$port" | tee -a "$results"
        kill "$pid"; wait "$pid" 2>/dev/null || true
        cur=""
        rm -f "$work"/*.aof "$work"/appendonlydir/* 2>/dev/null || true
    done
done
echo "round,test,tierkv/redis"
awk -F, '{v[$1","$2","$3]=$4; t[$1","$3]=1} END {for (k in t) {split(k,a,","); r=v[a[1]",redis,"a[2]]; q=v[a[1]",tierkv,"a[2]]; if (r>0) printf "%s,%s,%.2f\n", a[1], a[2], q/r}}' "$results" | sort
