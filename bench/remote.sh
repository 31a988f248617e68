#!/usr/bin/env bash
# Measures, side by side in one run, the CLI on a remote (sandboxd --listen: TLS on loopback,
# the fingerprint pinned, a client certificate) against the same daemon's streamed path without
# TLS (--insecure-listen, an API token) and OpenSSH on loopback (its default cipher):
#   - 1 GB of exec stdout and of stdin (targets: at least half the streamed path's throughput,
#     and twice OpenSSH's `ssh host head -c`)
#   - 1 GiB through `hiloop sandbox port-forward` (target: twice OpenSSH's `ssh -L`)
#   - `hiloop sandbox exec x -- true`, a new process a call (target: p50 within twice the unix
#     socket's)
# and writes the tables into docs/performance.md. Run as root after `make build`.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
RUNS=${RUNS:-30}
TRUNS=${TRUNS:-5}
SIZE=${SIZE:-1000000000}
FWD_SIZE=$((1 << 30))

need=()
command -v hyperfine >/dev/null || need+=(hyperfine)
[ -x /usr/sbin/sshd ] || need+=(openssh-server)
command -v jq >/dev/null || need+=(jq)
if [ ${#need[@]} -gt 0 ]; then
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

work=$(mktemp -d /tmp/hlbench.XXXX)
export HILOOP_CONFIG_DIR=$work/cfg
cleanup() {
	set +e
	for p in ${pids:-}; do kill "$p" 2>/dev/null; done
	unset HILOOP_REMOTE
	stop_daemon
	rm -rf "$work"
}
trap cleanup EXIT

# A copy of the CLI, as `make install` leaves it (see bench/exec.sh).
install -m 0755 "$hiloop" "$work/hiloop"
hiloop=$work/hiloop

read -r tls_port plain_port sshd_port fwd_remote fwd_ssh <<<"$(free_ports 5)"
start_daemon --listen "127.0.0.1:$tls_port" --insecure-listen "127.0.0.1:$plain_port"
fp=$($hiloop system info -o json | jq -r .tls_fingerprint)
token=$($hiloop user trust-token admin -o json | jq -r .trust_token)
$hiloop remote add bench "https://127.0.0.1:$tls_port" --token "$token" --accept-fingerprint "$fp" >/dev/null
api_token=$($hiloop user token create admin --name bench)
remote="env HILOOP_REMOTE=bench $hiloop"
plain="env HILOOP_HOST=http://127.0.0.1:$plain_port HILOOP_TOKEN=$api_token $hiloop"
$hiloop sandbox create bench --image "$IMAGE" >/dev/null

# OpenSSH's sshd on loopback with a throwaway key: the reference.
mkdir -p "$work/ssh" /run/sshd
ssh-keygen -q -t ed25519 -N '' -f "$work/ssh/host" && ssh-keygen -q -t ed25519 -N '' -f "$work/ssh/user"
cp "$work/ssh/user.pub" "$work/ssh/authorized_keys"
/usr/sbin/sshd -D -p "$sshd_port" -h "$work/ssh/host" -o ListenAddress=127.0.0.1 -o PermitRootLogin=prohibit-password \
	-o AuthorizedKeysFile="$work/ssh/authorized_keys" -o StrictModes=no -o UsePAM=no -o PidFile=none &
pids="$!"
ssh_base="ssh -p $sshd_port -i $work/ssh/user -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o BatchMode=yes root@127.0.0.1"
sleep 0.3

# exec throughput: SIZE bytes of zeros out of the sandbox and into it. Every command's stdout is
# a pipe (--output=pipe); on the unix socket the CLI would hand it to the daemon, so the
# streamed path is the same daemon's plain TCP listener.
hyperfine -N --output=pipe --runs "$TRUNS" --warmup 1 --export-json "$work/tp.json" \
	-n "stdout, remote (TLS)" "$remote sandbox exec bench -- head -c $SIZE /dev/zero" \
	-n "stdout, streamed without TLS (--insecure-listen)" "$plain sandbox exec bench -- head -c $SIZE /dev/zero" \
	-n "stdout, OpenSSH (ssh localhost head -c)" "$ssh_base head -c $SIZE /dev/zero" \
	-n "stdin, remote (TLS)" "bash -c 'head -c $SIZE /dev/zero | $remote sandbox exec -i bench -- sh -c \"cat >/dev/null\"'" \
	-n "stdin, streamed without TLS (--insecure-listen)" "bash -c 'head -c $SIZE /dev/zero | $plain sandbox exec -i bench -- sh -c \"cat >/dev/null\"'" \
	-n "stdin, OpenSSH (ssh localhost cat)" "bash -c 'head -c $SIZE /dev/zero | $ssh_base \"cat >/dev/null\"'" >/dev/null

# exec true: a fresh CLI process each call, on the unix socket and on the remote.
hyperfine -N --runs "$RUNS" --warmup 3 --export-json "$work/lat.json" \
	-n "hiloop sandbox exec x -- true (unix socket)" "$hiloop sandbox exec bench -- true" \
	-n "hiloop sandbox exec x -- true (remote, TLS)" "$remote sandbox exec bench -- true" \
	-n "ssh localhost true (OpenSSH)" "$ssh_base true" >/dev/null

# A port forward over the remote against OpenSSH's -L, the same 1 GiB from bench/tcpbench in the
# sandbox (hiloop) and on the host (OpenSSH), interleaved.
CGO_ENABLED=0 go build -o "$work/tcpbench" ./bench/tcpbench
source_port=$(free_ports 1)
$hiloop sandbox exec -i bench -- sh -c 'cat > /tmp/tcpbench && chmod +x /tmp/tcpbench' <"$work/tcpbench"
$hiloop sandbox exec bench -- sh -c "nohup /tmp/tcpbench serve 127.0.0.1:9000 $FWD_SIZE >/dev/null 2>&1 &"
"$work/tcpbench" serve "127.0.0.1:$source_port" $FWD_SIZE &
pids="$pids $!"
HILOOP_REMOTE=bench $hiloop sandbox port-forward bench "127.0.0.1:$fwd_remote:9000" >/dev/null &
pids="$pids $!"
$ssh_base -N -o ExitOnForwardFailure=yes -L "$fwd_ssh:127.0.0.1:$source_port" &
pids="$pids $!"
for port in "$fwd_remote" "$fwd_ssh"; do
	for _ in $(seq 100); do ss -ltn | grep -q "127.0.0.1:$port " && break; sleep 0.05; done
done
# The TLS floor: one TLS connection on the same loopback between two processes (bench/tcpbench
# serve-tls and fetch-tls, Go's crypto/tls as sandboxd's and hiloop's), no hiloop at all: what
# encrypting and decrypting every byte once costs these cores.
tls_port=$(free_ports 1)
"$work/tcpbench" serve-tls "127.0.0.1:$tls_port" $FWD_SIZE &
pids="$pids $!"
for _ in $(seq 100); do ss -ltn | grep -q "127.0.0.1:$tls_port " && break; sleep 0.05; done
for _ in $(seq "$TRUNS"); do
	"$work/tcpbench" fetch "127.0.0.1:$fwd_remote" "$FWD_SIZE" 1 >>"$work/fwd_remote.txt"
	"$work/tcpbench" fetch "127.0.0.1:$fwd_ssh" "$FWD_SIZE" 1 >>"$work/fwd_ssh.txt"
	"$work/tcpbench" fetch-tls "127.0.0.1:$tls_port" "$FWD_SIZE" 1 >>"$work/tls_floor.txt"
done

table=$(python3 - "$work" "$SIZE" <<'PY'
import json, sys
work, size = sys.argv[1], int(sys.argv[2])
tp = {r["command"]: size / r["median"] / 1e6 for r in json.load(open(f"{work}/tp.json"))["results"]}
print("| transfer | MB/s (median) | against the streamed path | against OpenSSH |")
print("|---|---:|---:|---:|")
for way in ("stdout", "stdin"):
    rem = tp[f"{way}, remote (TLS)"]
    plain = tp[f"{way}, streamed without TLS (--insecure-listen)"]
    ssh = next(v for k, v in tp.items() if k.startswith(f"{way}, OpenSSH"))
    print(f"| exec {way}, 1 GB, remote (TLS) | {rem:,.0f} | {rem / plain:.0%} | {rem / ssh:.1f}× |")
    print(f"| exec {way}, 1 GB, streamed without TLS | {plain:,.0f} | | |")
    print(f"| exec {way}, 1 GB, OpenSSH | {ssh:,.0f} | | |")
med = lambda f: sorted(int(x) for x in open(f"{work}/{f}"))[len(open(f"{work}/{f}").readlines()) // 2]
fr, fs = med("fwd_remote.txt"), med("fwd_ssh.txt")
print(f"| port-forward, 1 GiB, remote (TLS) | {fr:,} | | {fr / fs:.1f}× |")
print(f"| `ssh -L`, 1 GiB, OpenSSH | {fs:,} | | |")
print(f"| one TLS connection on loopback, no hiloop (`tcpbench fetch-tls`: the TLS floor) | {med('tls_floor.txt'):,} | | |")
print()
print("| command | median ms | p95 ms |")
print("|---|---:|---:|")
for r in json.load(open(f"{work}/lat.json"))["results"]:
    ms = sorted(t * 1000 for t in r["times"])
    print(f"| {r['command']} | {ms[len(ms) // 2]:.1f} | {ms[min(len(ms) - 1, int(0.95 * len(ms)))]:.1f} |")
PY
)
echo "$table"

write_block bench/remote.sh "Measured $(date -u +%Y-%m-%d) on $(nproc) cores, $(uname -r), image \`$IMAGE\`, $TRUNS transfers and $RUNS calls each (load average $(cut -d' ' -f1-3 /proc/loadavg) at the end):

$table"
