#!/bin/sh
# Records testdata/traces/mixed.trace: a node started with --record-trace,
# one consumer acking everything, and five publishers one after another,
# alternating steady paced traffic and bursts sent as fast as confirms
# allow, of five message sizes:
#
#   phase  messages  bytes  pace
#   1      150       128    100 per second (1.5 s)
#   2      100       1024   burst
#   3      200       64     400 per second (0.5 s)
#   4      25        2048   burst
#   5      100       512    200 per second (0.5 s)
#
# 575 publishes in all; the replay test in cmd/fibrilctl counts on that
# number. Run from the repository root after `make build`:
#
#   sh testdata/traces/record-mixed.sh
set -eu

FIBRIL=${FIBRIL:-bin/fibril}
FIBRILCTL=${FIBRILCTL:-bin/fibrilctl}
ADDRESS=${ADDRESS:-127.0.0.1:17491}
OUT=${OUT:-testdata/traces/mixed.trace}
QUEUE=mixed

data=$(mktemp -d)
"$FIBRIL" serve --data "$data" --listen "$ADDRESS" --sync-interval 100ms --record-trace "$OUT" --log-level warn &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null; rm -rf "$data"' EXIT

for attempt in $(seq 50); do
	"$FIBRILCTL" queues --server "$ADDRESS" >/dev/null 2>&1 && break
	sleep 0.1
done

ctl() { "$FIBRILCTL" "$@" --server "$ADDRESS"; }

ctl declare "$QUEUE"
ctl consume "$QUEUE" --count 575 --ack --quiet --timeout 60s &
consumer=$!
sleep 0.2

ctl publish "$QUEUE" --count 150 --size 128 --rate 100
sleep 0.3
ctl publish "$QUEUE" --count 100 --size 1024
sleep 0.3
ctl publish "$QUEUE" --count 200 --size 64 --rate 400
sleep 0.3
ctl publish "$QUEUE" --count 25 --size 2048
sleep 0.3
ctl publish "$QUEUE" --count 100 --size 512 --rate 200

wait "$consumer"
ctl delete "$QUEUE"
kill "$server"
wait "$server" || true
trap 'rm -rf "$data"' EXIT
ls -l "$OUT"
