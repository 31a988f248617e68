#!/usr/bin/env bash
# Measures, side by side in one run, with the same OpenSSH client and cipher:
#   - throughput of 1 GiB through `ssh -L` into a sandbox (hiloop's endpoint) against the same
#     transfer through OpenSSH's own sshd `-L` on this machine (target: at least OpenSSH's)
#   - `ssh NAME true` latency against OpenSSH's `ssh localhost true`
#   - 1 GiB through `hiloop sandbox port-forward` (the API, no SSH) beside both, a bare relay
#     and the floor
# and writes the table into docs/performance.md. Run as root after `make build`.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
RUNS=${RUNS:-5}
CIPHER=${CIPHER:-aes128-gcm@openssh.com}
SIZE=$((1 << 30))

work=$(mktemp -d /tmp/hlbench.XXXX)
export HILOOP_CONFIG_DIR=$work/cfg
cleanup() {
	set +e
	for p in ${pids:-}; do kill "$p" 2>/dev/null; done
	stop_daemon
	rm -rf "$work"
}
trap cleanup EXIT

start_daemon --ssh-listen 127.0.0.1:0
$hiloop sandbox create bench --image "$IMAGE" >/dev/null
$hiloop ssh-config bench >"$work/ssh_config"

# The source and the sink: bench/tcpbench, a server that sends SIZE bytes to every connection and a
# client that reads them, 1 MiB a call, inside the sandbox and on the host; fast enough that the
# figures measure the forwards, not the programs at their ends.
CGO_ENABLED=0 go build -o "$work/tcpbench" ./bench/tcpbench
# Host ports the kernel picks; 9000 is inside the sandbox's own network namespace.
read -r source_port sshd_port fwd_hiloop fwd_openssh <<<"$(free_ports 4)"
$hiloop sandbox exec -i bench -- sh -c 'cat > /tmp/tcpbench && chmod +x /tmp/tcpbench' <"$work/tcpbench"
$hiloop sandbox exec bench -- sh -c "nohup /tmp/tcpbench serve 127.0.0.1:9000 $SIZE >/dev/null 2>&1 &"
"$work/tcpbench" serve "127.0.0.1:$source_port" $SIZE &
pids="$!"
for _ in $(seq 100); do $hiloop sandbox exec bench -- sh -c 'ss -ltn | grep -q 127.0.0.1:9000' && break; sleep 0.05; done

# OpenSSH's sshd on loopback with a throwaway key: the reference.
mkdir -p "$work/ssh" /run/sshd
ssh-keygen -q -t ed25519 -N '' -f "$work/ssh/host" && ssh-keygen -q -t ed25519 -N '' -f "$work/ssh/user"
cp "$work/ssh/user.pub" "$work/ssh/authorized_keys"
/usr/sbin/sshd -D -p "$sshd_port" -h "$work/ssh/host" -o ListenAddress=127.0.0.1 -o PermitRootLogin=prohibit-password \
	-o AuthorizedKeysFile="$work/ssh/authorized_keys" -o StrictModes=no -o UsePAM=no -o PidFile=none &
pids="$pids $!"
openssh="ssh -p $sshd_port -i $work/ssh/user -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o BatchMode=yes"
hiloopssh="ssh -F $work/ssh_config -o BatchMode=yes"
sleep 0.3

# throughput NAME SSH... : MB/s of SIZE bytes through a -L forward, one line per run.
throughput() {
	local port=$1 target=$2
	shift 2
	"$@" -c "$CIPHER" -N -o ExitOnForwardFailure=yes -L "$port:$target" &
	local fwd=$!
	for _ in $(seq 100); do ss -ltn | grep -q "127.0.0.1:$port " && break; sleep 0.05; done
	"$work/tcpbench" fetch "127.0.0.1:$port" "$SIZE" "$RUNS" || { kill $fwd; return 1; }
	kill $fwd
	wait $fwd 2>/dev/null || true
}
throughput "$fwd_hiloop" 127.0.0.1:9000 $hiloopssh bench.hiloop >"$work/tp_hiloop.txt"
throughput "$fwd_openssh" "127.0.0.1:$source_port" $openssh root@127.0.0.1 >"$work/tp_openssh.txt"

# The same transfer through `hiloop sandbox port-forward` (on the unix socket the CLI hands each
# connection to sandboxd, which joins it to the sandbox's port: two loopback TCP hops and one
# spliced relay; issue's target: 1.5 GB/s and twice OpenSSH's -L), through a bare relay on the
# host (`tcpbench relay`: the same two hops and splice, no daemon or sandbox; the ceiling of any
# forward that relays) and straight from the host's source (the floor: one loopback hop, no
# forward), the three interleaved so that the machine's load weighs on them alike.
read -r fwd_api relay_port <<<"$(free_ports 2)"
$hiloop sandbox port-forward bench "127.0.0.1:$fwd_api:9000" >/dev/null &
pf=$!
"$work/tcpbench" relay "127.0.0.1:$relay_port" "127.0.0.1:$source_port" &
pids="$pids $!"
for port in "$fwd_api" "$relay_port"; do
	for _ in $(seq 100); do ss -ltn | grep -q "127.0.0.1:$port " && break; sleep 0.05; done
done
raw() { "$work/tcpbench" fetch "127.0.0.1:$1" "$SIZE" 1; }
for _ in $(seq "$RUNS"); do
	raw "$fwd_api" >>"$work/tp_api.txt"
	raw "$relay_port" >>"$work/tp_relay.txt"
	raw "$source_port" >>"$work/tp_floor.txt"
done
kill $pf
wait $pf 2>/dev/null || true

hyperfine -N --runs 20 --warmup 3 --export-json "$work/lat.json" \
	-n "ssh NAME.hiloop true (hiloop endpoint)" "$hiloopssh -c $CIPHER bench.hiloop true" \
	-n "ssh localhost true (OpenSSH sshd)" "$openssh -c $CIPHER root@127.0.0.1 true" >/dev/null

table=$(python3 - "$work" "$CIPHER" <<'PY'
import json, sys
work, cipher = sys.argv[1], sys.argv[2]
print("| measure | hiloop endpoint | OpenSSH sshd |")
print("|---|---:|---:|")
tp = lambda f: sorted(int(x) for x in open(f"{work}/{f}"))
h, o = tp("tp_hiloop.txt"), tp("tp_openssh.txt")
print(f"| 1 GiB through `ssh -L`, median MB/s ({cipher}) | {h[len(h)//2]} | {o[len(o)//2]} |")
a, fl = tp("tp_api.txt"), tp("tp_floor.txt")
am, om = a[len(a)//2], o[len(o)//2]
print(f"| 1 GiB through `hiloop sandbox port-forward` (no SSH), median MB/s | {am} ({am / om:.1f}× OpenSSH's `-L`) | — |")
rl = tp("tp_relay.txt")
print(f"| 1 GiB through a bare TCP relay on the host (`tcpbench relay`), median MB/s | {rl[len(rl)//2]} | |")
print(f"| 1 GiB straight from a loopback source (the floor), median MB/s | {fl[len(fl)//2]} | |")
r = {x["command"]: x for x in json.load(open(f"{work}/lat.json"))["results"]}
lat = [r[k] for k in r]
print(f"| `ssh ... true`, mean ms | {lat[0]['mean']*1000:.0f} | {lat[1]['mean']*1000:.0f} |")
PY
)
echo "$table"

write_block bench/ssh.sh "Measured $(date -u +%Y-%m-%d) on $(nproc) cores, $(uname -r), $RUNS transfers each, same client and cipher:

$table"
