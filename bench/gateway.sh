#!/usr/bin/env bash
# Measures the egress gateway, side by side in one run, with the same client (bench/gatewaybench)
# inside a sandbox through the transparent capture (no proxy variables) and on the host dialling
# the same HTTPS server on loopback directly:
#   - a small HTTPS request on a fresh connection each, p50 and p99 (target: p50 under 1 ms added)
#   - a 1 GiB HTTPS download, MB/s (target: at least 90% of direct)
#   - 1,000 concurrent connections from one sandbox held without error, and sandboxd's memory
#     per idle connection
# and writes the table into docs/performance.md. Run as root after `make build`.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
ROUNDS=${ROUNDS:-10}     # latency: rounds alternating sandbox and host...
REQUESTS=${REQUESTS:-50} # ...of this many requests each way
RUNS=${RUNS:-5}          # downloads each way, alternating
SIZE=$((1 << 30))
CONNS=${CONNS:-1000}
HOLD=${HOLD:-5} # seconds the connections stay idle
NAME=bench.test

work=$(mktemp -d /tmp/hlbench.XXXX)
cleanup() {
	set +e
	[ -n "${server_pid:-}" ] && kill "$server_pid"
	stop_daemon
	rm -rf "$work"
}
trap cleanup EXIT

# Static, so that the same binary runs on the host and in the sandbox's image.
CGO_ENABLED=0 go build -o "$work/gatewaybench" ./bench/gatewaybench
mkdir "$work/srv"
"$work/gatewaybench" serve "$work/srv" "$NAME" &
server_pid=$!
for _ in $(seq 100); do [ -f "$work/srv/port" ] && break; sleep 0.05; done
port=$(cat "$work/srv/port")

# A sandbox holds at most half of the daemon's connection budget, whose default comes from the
# descriptor limit (6 descriptors a connection, from half of RLIMIT_NOFILE): under a limit of about
# 24,000 that is fewer than 1,000, so the budget is named.
start_daemon --gateway-max-conns $((3 * CONNS)) --gateway-resolve "$NAME:443=127.0.0.1:$port"
$hiloop sandbox create bench --image "$IMAGE" >/dev/null
$hiloop sandbox exec -i bench -- sh -c 'cat > /workspace/gatewaybench && chmod +x /workspace/gatewaybench' <"$work/gatewaybench"
$hiloop sandbox exec -i bench -- sh -c 'cat > /workspace/ca.pem' <"$work/srv/ca.pem"
# In the sandbox the client dials the name, which resolves to a synthetic address the capture
# redirects to the gateway; on the host it dials the server. Both resolve once, outside the timing.
in_sandbox() { $hiloop sandbox exec bench -- /workspace/gatewaybench "$1" "$NAME:443" "$NAME" /workspace/ca.pem "${@:2}"; }
on_host() { "$work/gatewaybench" "$1" "127.0.0.1:$port" "$NAME" "$work/srv/ca.pem" "${@:2}"; }

# For context: the same client in the sandbox against the same server started on the sandbox's own
# loopback, which no gateway is on; what the sandbox costs a client, apart from the gateway.
$hiloop sandbox exec bench -- sh -c 'mkdir /tmp/srv && nohup /workspace/gatewaybench serve /tmp/srv '"$NAME"' >/dev/null 2>&1 &'
for _ in $(seq 100); do $hiloop sandbox exec bench -- test -f /tmp/srv/port && break; sleep 0.05; done
in_sandbox_local() { $hiloop sandbox exec bench -- sh -c '/workspace/gatewaybench latency "127.0.0.1:$(cat /tmp/srv/port)" "$1" /tmp/srv/ca.pem "$2"' sh "$NAME" "$@"; }

# Alternating keeps a burst of load from the other users of this machine off one side only.
for _ in $(seq "$ROUNDS"); do
	in_sandbox latency "$REQUESTS" >>"$work/lat_gw.txt"
	on_host latency "$REQUESTS" >>"$work/lat_direct.txt"
	in_sandbox_local "$REQUESTS" >>"$work/lat_local.txt"
done
# sandboxd's CPU time (user and system, in clock ticks) over the tunnelled downloads: the
# gateway's own cost per byte, whatever the client and server cost.
cpu() { awk '{print $14 + $15}' "/proc/$daemon_pid/stat"; }
for _ in $(seq "$RUNS"); do
	c0=$(cpu)
	in_sandbox download $SIZE 1 >>"$work/tp_gw.txt"
	echo $(($(cpu) - c0)) >>"$work/cpu_gw.txt"
	on_host download $SIZE 1 >>"$work/tp_direct.txt"
done

# The gateway runs in sandboxd: its resident memory with the connections open, less before.
rss() { awk '/^VmRSS:/ {print $2}' "/proc/$daemon_pid/status"; }
rss_before=$(rss)
in_sandbox hold "$CONNS" "$HOLD" >"$work/hold.txt" 2>&1 &
hold_pid=$!
for _ in $(seq 1200); do grep -q '^held ' "$work/hold.txt" && break; sleep 0.05; done
sleep 1 # let the last connections' goroutines settle
rss_held=$(rss)
wait "$hold_pid" || { cat "$work/hold.txt" >&2; exit 1; }
cat "$work/hold.txt" >&2

# The terminating, secret-injecting path, measured in process (client, gateway and server all
# in one Go test binary, so both TLS ends share the cores with the gateway): HTTP/1.1 and HTTP/2.
go test -run '^$' -bench '^BenchmarkTerminatedDownload$' -benchtime 5x ./internal/gateway/ >"$work/term.txt"

table=$(python3 - "$work" "$CONNS" "$HOLD" "$rss_before" "$rss_held" "$(getconf CLK_TCK)" <<'PY'
import statistics, sys
work, conns, hold, before, held, tck = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
nums = lambda f: sorted(float(x) for x in open(f"{work}/{f}"))
pct = lambda v, q: v[min(len(v) - 1, int(q * len(v)))]
gw, direct, local = nums("lat_gw.txt"), nums("lat_direct.txt"), nums("lat_local.txt")
print("| figure | through the gateway | direct on the host | target | met |")
print("|---|---:|---:|---:|:-:|")
for q, label in ((0.5, "p50"), (0.99, "p99")):
    g, d = pct(gw, q) / 1000, pct(direct, q) / 1000
    if q == 0.5:
        target, met = "< 1 ms added", "yes" if g - d < 1 else "**no**"
    else:
        target, met = "context", ""
    print(f"| small HTTPS request, fresh connection each ({len(gw)} each way), {label} ms "
          f"(added: {g - d:+.2f}) | {g:.2f} | {d:.2f} | {target} | {met} |")
print(f"| the same request in the sandbox to the server started on its own loopback (no gateway), p50 ms "
      f"(added: {(pct(local, 0.5) - pct(direct, 0.5)) / 1000:+.2f}) | {pct(local, 0.5) / 1000:.2f} | {pct(direct, 0.5) / 1000:.2f} | context | |")
tg, td = nums("tp_gw.txt"), nums("tp_direct.txt")
mg, md = statistics.median(tg), statistics.median(td)
rng = lambda v: f"{statistics.median(v):,.0f} ({v[0]:,.0f}–{v[-1]:,.0f})"
print(f"| 1 GiB HTTPS download, tunnelled, median (range) MB/s ({len(tg)} each way; {mg / md:.0%} of direct) "
      f"| {rng(tg)} | {rng(td)} | ≥ 90% of direct | {'yes' if mg >= 0.9 * md else '**no**'} |")
cpu = statistics.median(int(x) for x in open(f"{work}/cpu_gw.txt")) / tck
print(f"| sandboxd's CPU time per tunnelled GiB, s (user and system, median; a core of its own would carry {1.073741824e3 / cpu:,.0f} MB/s) "
      f"| {cpu:.2f} | | context | |")
import re
for line in open(f"{work}/term.txt"):
    m = re.match(r"^BenchmarkTerminatedDownload/h2=(\w+)\S*\s+\d+\s+.*?([\d.]+) MB/s", line)
    if m:
        mbs, proto = float(m.group(2)), "HTTP/2" if m.group(1) == "true" else "HTTP/1.1"
        print(f"| HTTPS download through the terminating, secret-injecting path ({proto}; in process: "
              f"client, gateway and server share the cores), MB/s | {mbs:,.0f} | | ≥ 500 | {'yes' if mbs >= 500 else '**no**'} |")
lines = open(f"{work}/hold.txt").read().split("\n")
alive = next(l for l in lines if l.startswith("alive ")).split()
ok = int(alive[1]) == conns and int(alive[3]) == 0
print(f"| {conns:,} concurrent connections from one sandbox, idle {hold} s, then a request on each "
      f"| {int(alive[1]):,} alive, {int(alive[3])} failed | | all alive | {'yes' if ok else '**no**'} |")
print(f"| sandboxd's memory per idle connection, KiB (VmRSS {before / 1024:.0f} → {held / 1024:.0f} MiB) "
      f"| {(held - before) / conns:.1f} | | context | |")
PY
)
echo "$table"

write_block bench/gateway.sh "Measured $(date -u +%Y-%m-%d) on $(nproc) cores, $(uname -r), image \`$IMAGE\`, load average $(cut -d' ' -f1-3 /proc/loadavg) at the end:

$table"
