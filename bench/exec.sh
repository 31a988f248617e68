#!/usr/bin/env bash
# Measures, side by side in one run:
#   - `hiloop sandbox create` → first `exec true` (issue 15's target: under 40 ms p50), with a
#     spare sandbox ready (sandboxd's default, --spares 1: the create takes it) and with limits
#     no spare has (the create starts a sandbox of its own, as every create did before spares)
#   - `hiloop sandbox exec x -- true` against `nsenter -t PID -a true` (the floor) and OpenSSH's
#     `ssh localhost true` (target: under half of OpenSSH's)
#   - 1 GB of stdout and of stdin through `hiloop sandbox exec` on the unix socket, where the CLI
#     hands its pipes to the daemon (target: 1 GB/s each), and over TCP, where the data streams,
#     against a pipe (the floor), two pipe hops and OpenSSH's `ssh localhost head -c`
# and writes the tables into docs/performance.md. Run as root after `make build`.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
RUNS=${RUNS:-30}

need=()
command -v hyperfine >/dev/null || need+=(hyperfine)
[ -x /usr/sbin/sshd ] || need+=(openssh-server)
command -v ssh >/dev/null || need+=(openssh-client)
if [ ${#need[@]} -gt 0 ]; then
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

work=$(mktemp -d /tmp/hlbench.XXXX)
cleanup() {
	set +e
	stop_daemon
	[ -n "${sshd_pid:-}" ] && kill "$sshd_pid"
	rm -rf "$work"
}
trap cleanup EXIT

# The CLI as `make install` leaves it, a copy: a binary the Go linker has just written (bin/
# after `make build`) started 0.5-0.6 ms slower per exec here than a copy of the same file,
# with as many page faults (hyperfine, 300 runs: 5.9 against 5.3 ms for `exec true`).
install -m 0755 "$hiloop" "$work/hiloop"
hiloop=$work/hiloop

api_port=$(free_ports 1)
start_daemon --insecure-listen "127.0.0.1:$api_port"
# An API token of the built-in admin: the TCP path acts in the same namespace as the socket.
api_token=$($hiloop user token create admin --name bench)
tcp="env HILOOP_HOST=http://127.0.0.1:$api_port HILOOP_TOKEN=$api_token $hiloop"

# A private sshd on loopback with a throwaway key: the reference.
mkdir -p "$work/ssh"
ssh-keygen -q -t ed25519 -N '' -f "$work/ssh/host" && ssh-keygen -q -t ed25519 -N '' -f "$work/ssh/user"
cp "$work/ssh/user.pub" "$work/ssh/authorized_keys"
mkdir -p /run/sshd
sshd_port=$(free_ports 1)
/usr/sbin/sshd -D -p "$sshd_port" -h "$work/ssh/host" -o ListenAddress=127.0.0.1 -o PermitRootLogin=prohibit-password \
	-o AuthorizedKeysFile="$work/ssh/authorized_keys" -o StrictModes=no -o UsePAM=no -o PidFile=none &
sshd_pid=$!
sleep 0.3
ssh_base="ssh -p $sshd_port -i $work/ssh/user -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o BatchMode=yes root@127.0.0.1"
ssh_cmd="$ssh_base true"

$hiloop sandbox create bench --image "$IMAGE" >/dev/null
# The floor enters bench's own init (a spare's is gone once a create takes it).
bench_id=$($hiloop sandbox get bench -o json | python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])')
pid=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["init_process_pid"])' "$work/d/runtime/$bench_id/state.json")

# create → first exec: a fresh sandbox each run, deleted outside the timing, where the spare
# that replaces the one the last create took is also waited for: each create finds one ready,
# as creates a few seconds apart do.
spare_ready="for i in \$(seq 1000); do $hiloop version | grep -q \"1 of 1 ready\" && exit 0; sleep 0.01; done; exit 1"
hyperfine -N --runs "$RUNS" --warmup 2 --export-json "$work/create.json" \
	--prepare "bash -c '$hiloop sandbox delete cx >/dev/null 2>&1 || true; $spare_ready'" \
	--cleanup "bash -c '$hiloop sandbox delete cx >/dev/null 2>&1 || true'" \
	-n "hiloop sandbox create → exec true (a spare ready)" "bash -c '$hiloop sandbox create cx --image $IMAGE >/dev/null && $hiloop sandbox exec cx -- true'" \
	-n "hiloop sandbox create --cpus 1.5 → exec true (no spare fits: its own start)" "bash -c '$hiloop sandbox create cx --image $IMAGE --cpus 1.5 >/dev/null && $hiloop sandbox exec cx -- true'" >/dev/null
# The same through the API alone (bench/createbench): the daemon's part, without the two CLI
# processes, whose start is what a process start costs on the machine.
go build -o "$work/createbench" ./bench/createbench
read -r api_spare_p50 api_spare_p95 < <("$work/createbench" "unix://$work/s.sock" "$IMAGE" "$RUNS")
read -r api_own_p50 api_own_p95 < <("$work/createbench" "unix://$work/s.sock" "$IMAGE" "$RUNS" '{"cpus": 1.5}')
hyperfine -N --runs "$RUNS" --warmup 3 --export-json "$work/exec.json" \
	-n "hiloop sandbox exec x -- true" "$hiloop sandbox exec bench -- true" \
	-n "nsenter -t PID -a true (floor)" "nsenter -t $pid -a true" \
	-n "ssh localhost true (OpenSSH)" "$ssh_cmd" >/dev/null

# Throughput: SIZE bytes of zeros out of the sandbox and into it, beside the same bytes through
# one and two pipes on the host and through OpenSSH (its default cipher). Every command's stdout
# is a pipe (--output=pipe), as the floor's is.
SIZE=${SIZE:-1000000000}
TRUNS=${TRUNS:-5}
hyperfine -N --output=pipe --runs "$TRUNS" --warmup 1 --export-json "$work/tp.json" \
	-n "hiloop sandbox exec x -- head -c 1GB /dev/zero (stdout, handed off)" "$hiloop sandbox exec bench -- head -c $SIZE /dev/zero" \
	-n "head -c 1GB /dev/zero | hiloop sandbox exec -i x -- cat (stdin, handed off)" "bash -c 'head -c $SIZE /dev/zero | $hiloop sandbox exec -i bench -- sh -c \"cat >/dev/null\"'" \
	-n "the same stdout over TCP (streamed)" "$tcp sandbox exec bench -- head -c $SIZE /dev/zero" \
	-n "the same stdin over TCP (streamed)" "bash -c 'head -c $SIZE /dev/zero | $tcp sandbox exec -i bench -- sh -c \"cat >/dev/null\"'" \
	-n "head -c 1GB /dev/zero | cat (a pipe: the floor)" "bash -c 'head -c $SIZE /dev/zero | cat >/dev/null'" \
	-n "head -c 1GB /dev/zero | cat | cat (two pipe hops)" "bash -c 'head -c $SIZE /dev/zero | cat | cat >/dev/null'" \
	-n "ssh localhost head -c 1GB /dev/zero (OpenSSH)" "$ssh_base head -c $SIZE /dev/zero" >/dev/null
tptable=$(python3 - "$work/tp.json" "$SIZE" <<'PY'
import json, sys
size = int(sys.argv[2])
print("| transfer | median s | MB/s |")
print("|---|---:|---:|")
for r in json.load(open(sys.argv[1]))["results"]:
    name = r['command'].replace('|', '\\|')
    print(f"| {name} | {r['median']:.2f} | {size / r['median'] / 1e6:,.0f} |")
PY
)
echo "$tptable"

table=$(python3 - "$work/create.json" "$work/exec.json" <<'PY'
import json, sys
rows = []
for path in sys.argv[1:]:
    for r in json.load(open(path))["results"]:
        ms = sorted(t * 1000 for t in r["times"])
        p = lambda q: ms[min(len(ms) - 1, int(q * len(ms)))]
        rows.append((r["command"], r["mean"] * 1000, p(0.5), p(0.95)))
print("| command | mean ms | median ms | p95 ms |")
print("|---|---:|---:|---:|")
for name, mean, med, p95 in rows:
    print(f"| {name} | {mean:.1f} | {med:.1f} | {p95:.1f} |")
PY
)
table="$table
| API: create → exec true (a spare ready; bench/createbench) | | $api_spare_p50 | $api_spare_p95 |
| API: create --cpus 1.5 → exec true (its own start) | | $api_own_p50 | $api_own_p95 |"
echo "$table"

write_block bench/exec.sh "Measured $(date -u +%Y-%m-%d) on $(nproc) cores, $(uname -r), image \`$IMAGE\`, $RUNS runs each (load average $(cut -d' ' -f1-3 /proc/loadavg) at the end):

$table

Throughput, $TRUNS runs each:

$tptable"
