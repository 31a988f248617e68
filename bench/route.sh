#!/usr/bin/env bash
# Measures, side by side with the targets in one run:
#   - the model route's overhead (go test -bench BenchmarkRoute, internal/modelroute): time to
#     the first streamed byte through the route vs from the provider directly (target: under
#     2 ms added; the benchmark reports each run's mean, the table the median of the runs), the
#     throughput of an 8 MiB stream (target: within 5% of direct) and of a model's stream of
#     50-byte text deltas, each flushed on its own (events/s), each with the CPU the benchmark's
#     process (fake provider, route and client) spent per byte or event
#   - the first prompt on a stopped sandbox with the claude-code harness (the agents image), a
#     fake Anthropic API on the host behind the route: from `session prompt` to the first agent
#     text, split into sandbox start, harness start and first model byte
# and writes the table into docs/performance.md. Run as root after `make build`, with the agents
# image built (`hiloop image build agents`, or the e2e suite's cache).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
COUNT=${COUNT:-5}
RUNS=${RUNS:-5}

work=$(mktemp -d /tmp/hlbench.XXXX)
fake_pid=
cleanup() {
	set +e
	stop_daemon
	[ -n "$fake_pid" ] && kill "$fake_pid" && wait "$fake_pid" 2>/dev/null
	[ -n "${KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT

go test -run '^$' -bench '^BenchmarkRoute$' -count "$COUNT" ./internal/modelroute/ | tee "$work/go.txt" | grep '^Benchmark' >&2

key=sk-ant-api03-bench-0123456789
go build -o "$work/fakeprovider" ./bench/fakeprovider
"$work/fakeprovider" "$work" "$key" &
fake_pid=$!
for _ in $(seq 100); do [ -s "$work/url" ] && break; sleep 0.05; done
url=$(cat "$work/url")

IMAGE=agents start_daemon --log-level info --provider-url "anthropic=$url"
printf %s "$key" | $hiloop login add claude --api-key-stdin >/dev/null
$hiloop sandbox create bench --image agents >/dev/null
sid=$($hiloop session new bench --harness claude-code)
$hiloop session prompt "$sid" 'warm up' >/dev/null # the image's files in the page cache

# Each run: the sandbox stopped, then one prompt; the times come from the CLI (t0), the
# sandbox's started_at, the daemon's "harness started" log line, the fake's first request of the
# turn and the first agent_message_chunk event of the turn.
for i in $(seq "$RUNS"); do
	$hiloop sandbox stop bench >/dev/null
	curl -sS -X DELETE "$url/_fake/requests" >/dev/null
	after=$($hiloop session get "$sid" -o json | python3 -c 'import json, sys; print(json.load(sys.stdin)["last_seq"])')
	t0=$(date +%s.%N)
	$hiloop session prompt "$sid" "run $i" >/dev/null
	t1=$(date +%s.%N)
	started=$($hiloop sandbox get bench -o json | python3 -c 'import json, sys; print(json.load(sys.stdin)["started_at"])')
	harness=$(grep 'msg="harness started"' "$work/sandboxd.log" | grep 'sandbox=bench' | tail -1 | sed -n 's/^time=\([^ ]*\) .*/\1/p')
	model=$(curl -sS "$url/_fake/requests?path=/v1/messages" | python3 -c 'import json, sys; print(min(r["time"] for r in json.load(sys.stdin)))')
	text=$($hiloop session events "$sid" --after "$after" -o json | python3 -c '
import json, sys
for line in sys.stdin:
    e = json.loads(line)
    if e["type"] == "update" and e["data"].get("sessionUpdate") == "agent_message_chunk":
        print(e["time"]); break')
	echo "$t0 $t1 $started $harness $model $text"
done >"$work/e2e.txt"

table=$(python3 - "$work/go.txt" "$work/e2e.txt" <<'PY'
import re, statistics, sys
from datetime import datetime
go, e2e = sys.argv[1], sys.argv[2]
runs = {}
for line in open(go):
    m = re.match(r"^(Benchmark\S+?)(-\d+)?\s+\d+\s+(.*)$", line)
    if not m:
        continue
    fields = m.group(3).split()
    for value, unit in zip(fields[::2], fields[1::2]):
        runs.setdefault((m.group(1), unit), []).append(float(value))
med = lambda name, unit: statistics.median(runs[(name, unit)])
ttfb_d = med("BenchmarkRoute/ttfb/direct", "ns-ttfb/op") / 1e6
ttfb_r = med("BenchmarkRoute/ttfb/route", "ns-ttfb/op") / 1e6
mbs_d = med("BenchmarkRoute/stream/direct", "MB/s")
mbs_r = med("BenchmarkRoute/stream/route", "MB/s")
cpu_d = med("BenchmarkRoute/stream/direct", "cpu-ns/B")
cpu_r = med("BenchmarkRoute/stream/route", "cpu-ns/B")
ev_d = med("BenchmarkRoute/events/direct", "events/s")
ev_r = med("BenchmarkRoute/events/route", "events/s")
evcpu_d = med("BenchmarkRoute/events/direct", "cpu-ns/event")
evcpu_r = med("BenchmarkRoute/events/route", "cpu-ns/event")
added = ttfb_r - ttfb_d
ratio = mbs_r / mbs_d
ev_ratio = ev_r / ev_d
print("| figure | through the route | direct | target | met |")
print("|---|---:|---:|---:|:-:|")
print(f"| time to the first streamed byte, ms (added: +{added:.2f}) | {ttfb_r:.2f} | {ttfb_d:.2f} | < 2 ms added | {'yes' if added < 2 else '**no**'} |")
print(f"| an 8 MiB stream, MB/s ({ratio:.0%} of direct) | {mbs_r:,.0f} | {mbs_d:,.0f} | within 5% | {'yes' if ratio >= 0.95 else '**no**'} |")
print(f"| an 8 MiB stream, CPU ns per byte (the process: provider, route, client) | {cpu_r:.2f} | {cpu_d:.2f} | context | |")
print(f"| a model's stream of 50-byte deltas, events/s ({ev_ratio:.0%} of direct) | {ev_r:,.0f} | {ev_d:,.0f} | within 5% | {'yes' if ev_ratio >= 0.95 else '**no**'} |")
print(f"| a model's stream of 50-byte deltas, CPU µs per event (the process) | {evcpu_r/1000:.1f} | {evcpu_d/1000:.1f} | context | |")

def ts(s):
    if re.match(r"^\d+\.\d+$", s):
        return float(s)
    s = re.sub(r"(\.\d{6})\d+", r"\1", s.replace("Z", "+00:00"))
    return datetime.fromisoformat(s).timestamp()
parts = {"sandbox start": [], "harness start": [], "first model request": [], "first agent text": [], "whole prompt": []}
for line in open(e2e):
    t0, t1, started, harness, model, text = map(ts, line.split())
    parts["sandbox start"].append(started - t0)
    parts["harness start"].append(harness - started)
    parts["first model request"].append(model - harness)
    parts["first agent text"].append(text - t0)
    parts["whole prompt"].append(t1 - t0)
for what, v in parts.items():
    v = sorted(v)
    print(f"| first prompt on a stopped sandbox, claude-code: {what}, s{' (from the prompt)' if what in ('first agent text', 'whole prompt') else ''} | {statistics.median(v):.2f} ({v[0]:.2f}–{v[-1]:.2f}) | | context | |")
PY
)
echo "$table"

write_block bench/route.sh "Measured $(date -u +%Y-%m-%d) on $(nproc) cores, $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg) at the end; \`go test -bench BenchmarkRoute\` -count $COUNT (medians); $RUNS first prompts, each on a freshly stopped sandbox of the agents image, the fake provider on the host's loopback:

$table"
