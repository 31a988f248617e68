#!/usr/bin/env bash
# Measures, side by side in one run, on a workspace holding 1 GiB of written data:
#   - hiloop sandbox snapshot create (target: under 250 ms)
#   - hiloop sandbox create --from-snapshot, a fork that starts (target: under 300 ms)
#   - hiloop sandbox grow by 1 GiB while the sandbox runs (target: under 50 ms)
#   - cp --sparse=always --reflink=never of the same workspace image: the naive baseline
# and writes the table into docs/performance.md. Run as root after `make build`.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
RUNS=${RUNS:-10}

work=$(mktemp -d /tmp/hlbench.XXXX)
cleanup() {
	set +e
	stop_daemon
	rm -rf "$work"
}
trap cleanup EXIT

start_daemon

$hiloop sandbox create bench --image "$IMAGE" --workspace-gib 10 >/dev/null
$hiloop sandbox exec bench -- sh -c 'head -c 1073741824 /dev/urandom > /workspace/data && sync'
img=$(ls "$work"/d/volumes/*.img)

# ms runs CMD... RUNS times and prints one duration in milliseconds per line.
ms() {
	for i in $(seq "$RUNS"); do
		local t0 t1
		t0=$(date +%s%N)
		"$@" "$i" >/dev/null
		t1=$(date +%s%N)
		echo $(((t1 - t0) / 1000))
	done
}
snapshot() { $hiloop sandbox snapshot create bench --name "s$1"; }
fork() { $hiloop sandbox create "f$1" --image "$IMAGE" --from-snapshot s1; }
grow() { $hiloop sandbox grow bench --workspace-gib $((10 + $1)); }
naive() { cp --sparse=always --reflink=never "$img" "$work/d/volumes/copy$1.raw" && sync "$work/d/volumes/copy$1.raw"; }

ms snapshot >"$work/snapshot.txt"
ms fork >"$work/fork.txt"
for i in $(seq "$RUNS"); do $hiloop sandbox delete "f$i" >/dev/null; done
ms grow >"$work/grow.txt"
ms naive >"$work/naive.txt"
rm -f "$work"/d/volumes/copy*.raw

table=$(python3 - "$work" <<'PY'
import sys
work = sys.argv[1]
rows = [
    ("hiloop sandbox snapshot create (1 GiB written)", "snapshot"),
    ("hiloop sandbox create --from-snapshot (fork, started)", "fork"),
    ("hiloop sandbox grow +1 GiB (running)", "grow"),
    ("cp --sparse=always --reflink=never of the workspace image (baseline)", "naive"),
]
print("| operation | mean ms | median ms | max ms |")
print("|---|---:|---:|---:|")
for name, f in rows:
    us = sorted(int(x) for x in open(f"{work}/{f}.txt"))
    ms = [u / 1000 for u in us]
    print(f"| {name} | {sum(ms)/len(ms):.1f} | {ms[len(ms)//2]:.1f} | {ms[-1]:.1f} |")
PY
)
echo "$table"

write_block bench/storage.sh "Measured $(date -u +%Y-%m-%d) on $(nproc) cores, $(uname -r), $RUNS runs each, through the CLI:

$table"
