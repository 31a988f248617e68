#!/usr/bin/env bash
# Measures, side by side with the targets in one run:
#   - durable appends/s to the session event log: one producer queueing (Enqueue, as the daemon
#     stores a harness's updates; target: 50,000 events/s), and Append with 1 and 64 concurrent
#     appenders, each waiting for its own fsync, for context
#   - replay of 100,000 stored events from cursor 0, with Since and with Subscribe (target: 0.5 s)
#   - p99 delay from an append to each of 100 live watchers (target: 10 ms)
#   - end to end: a 10,000-update turn of the fake harness in a real sandbox through a real
#     sandboxd, followed to its end by `hiloop session prompt -o json`, in updates/s
# and writes the table into docs/performance.md. Run as root after `make build`.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
COUNT=${COUNT:-3}
BENCHTIME=${BENCHTIME:-2s}
RUNS=${RUNS:-5}

work=$(mktemp -d /tmp/hlbench.XXXX)
cleanup() {
	set +e
	stop_daemon
	rm -rf "$work"
}
trap cleanup EXIT

# The log's own benchmarks, with real fsync on this machine's disk (TMPDIR, as the daemon's data dir).
go test -run '^$' -bench '^Benchmark(Append|Enqueue|Replay100k|LiveLatency)$' \
	-benchtime "$BENCHTIME" -count "$COUNT" ./internal/eventlog/ | tee "$work/go.txt" | grep '^Benchmark' >&2
# The daemon's side of a chatty turn: the fake harness as a local process, the supervisor's tap,
# the log; no sandbox, WebSocket or CLI.
go test -run '^$' -bench '^BenchmarkChattyTurn$' -benchtime 10x -count "$COUNT" ./internal/session/ |
	tee -a "$work/go.txt" | grep '^Benchmark' >&2

# End to end: the fake harness writes 10,000 message chunks as fast as it can; the daemon stores
# and streams each one; the CLI prints one JSON line per event.
start_daemon
$hiloop sandbox create bench --image "$IMAGE" >/dev/null
$hiloop sandbox exec -i bench -- sh -c 'cat > /workspace/chatty.fake' <internal/harness/fake/testdata/chatty.fake
sid=$($hiloop session new bench --harness fake)
updates=$(grep -Eo '^repeat [0-9]+' internal/harness/fake/testdata/chatty.fake | awk '{n += $2} END {print n}')
turn() { $hiloop session prompt "$sid" "run chatty.fake" -o json | wc -l; }
turn >/dev/null # warm-up: the harness's first turn
for _ in $(seq "$RUNS"); do
	t0=$(date +%s%N)
	lines=$(turn)
	t1=$(date +%s%N)
	# The prompt, the repeated chunks, "message end" and turn_end.
	[ "$lines" -ge $((updates + 2)) ] || { echo "short turn: $lines events" >&2; exit 1; }
	echo "$(((t1 - t0) / 1000)) $lines"
done >"$work/e2e.txt"

table=$(python3 - "$work/go.txt" "$work/e2e.txt" "$updates" <<'PY'
import re, statistics, sys
go, e2e, updates = sys.argv[1], sys.argv[2], int(sys.argv[3])
runs = {}
for line in open(go):
    m = re.match(r"^(Benchmark\S+?)(-\d+)?\s+\d+\s+(.*)$", line)
    if not m:
        continue
    fields = m.group(3).split()
    for value, unit in zip(fields[::2], fields[1::2]):
        runs.setdefault((m.group(1), unit), []).append(float(value))

def figure(name, unit, scale=1.0):
    v = sorted(x * scale for x in runs[(name, unit)])
    return statistics.median(v), v[0], v[-1]

# row prints one figure: its median and range, its target (under it, or at least it), and whether
# the median meets it; a figure without a target is there for context.
def row(what, fig, fmt, target=None, below=True):
    med, lo, hi = fig
    spread = fmt(med) if lo == hi else f"{fmt(med)} ({fmt(lo)}–{fmt(hi)})"
    if target is None:
        print(f"| {what} | {spread} | context | |")
        return
    met = med < target if below else med >= target
    print(f"| {what} | {spread} | {'< ' if below else '≥ '}{fmt(target)} | {'yes' if met else '**no**'} |")

rate = lambda x: f"{x:,.0f}"
sec = lambda x: f"{x:.3f}"
ms = lambda x: f"{x:.2f}"

print("| figure | measured, median (range) | target | met |")
print("|---|---:|---:|:-:|")
row("append, events/s: 1 producer queueing (Enqueue, as the daemon stores a harness's updates)",
    figure("BenchmarkEnqueue", "events/s"), rate, 50000, below=False)
row("append, events/s: 1 appender waiting for each fsync (Append)",
    figure("BenchmarkAppend/appenders=1", "events/s"), rate)
row("append, events/s: 64 concurrent appenders (Append, group commit)",
    figure("BenchmarkAppend/appenders=64", "events/s"), rate)
row("replay of 100,000 events from cursor 0, s: Since",
    figure("BenchmarkReplay100k/since", "ns/op", 1e-9), sec, 0.5)
row("replay of 100,000 events from cursor 0, s: Subscribe",
    figure("BenchmarkReplay100k/subscribe", "ns/op", 1e-9), sec, 0.5)
row("live latency to 100 watchers, p99 ms: from Append called",
    figure("BenchmarkLiveLatency", "p99-after-call-ms"), ms, 10)
row("live latency to 100 watchers, p99 ms: from Append returning",
    figure("BenchmarkLiveLatency", "p99-after-return-ms"), ms, 10)

row("a 10,000-update fake-harness turn through the supervisor and the log, updates/s (no sandbox, WebSocket or CLI)",
    figure("BenchmarkChattyTurn", "updates/s"), rate, 50000, below=False)

# Every line but the prompt's and turn_end's is an update.
turns = [tuple(map(int, l.split())) for l in open(e2e)]
per_s = sorted((lines - 2) / (us / 1e6) for us, lines in turns)
turn_s = sorted(us / 1e6 for us, _ in turns)
print(f"| end to end, updates/s: a {updates:,}-update fake-harness turn via sandboxd to `session prompt -o json` "
      f"({statistics.median(turn_s):.2f} s a turn) | {rate(statistics.median(per_s))} ({rate(per_s[0])}–{rate(per_s[-1])}) | "
      f"≥ {rate(50000)} | {'yes' if statistics.median(per_s) >= 50000 else '**no**'} |")
PY
)
echo "$table"

write_block bench/sessions.sh "Measured $(date -u +%Y-%m-%d) on $(nproc) cores, $(uname -r), with real fsync on the same disk as the daemon's data; \`go test -bench\` with -benchtime $BENCHTIME -count $COUNT; end to end $RUNS turns after a warm-up, image \`$IMAGE\`:

$table"
