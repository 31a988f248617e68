#!/usr/bin/env bash
# Measures, side by side in one run, on a workspace holding 1 GiB of written data:
#   - hiloop sandbox snapshot create (target: under 250 ms)
#   - hiloop sandbox create --from-snapshot, a fork that starts (target: under 300 ms)
#   - hiloop sandbox grow by 1 GiB while the sandbox runs (target: under 50 ms)
#   - cp --sparse=always --reflink=never of the same workspace image: the naive baseline
# and writes the table into docs/performance.md. Run as root after `make build`.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
RUNS=${RUNS:-10}
IMAGES_DIR=${IMAGES_DIR:-/var/cache/hiloop-test/images}
IMAGE=${IMAGE:-minimal}

work=$(mktemp -d /tmp/hlbench.XXXX)
export HILOOP_HOST=unix://$work/s.sock
hiloop=$ROOT/bin/hiloop
cleanup() {
	set +e
	for n in $($hiloop sandbox list -o json 2>/dev/null | sed -n 's/^      "name": "\(.*\)",$/\1/p'); do $hiloop sandbox delete --with-snapshots "$n" >/dev/null; done
	for s in $($hiloop sandbox snapshot list -o json 2>/dev/null | sed -n 's/^      "name": "\(.*\)",$/\1/p'); do $hiloop sandbox snapshot delete "$s" >/dev/null; done
	[ -n "${daemon_pid:-}" ] && kill "$daemon_pid" && wait "$daemon_pid"
	rm -rf "$work"
}
trap cleanup EXIT

"$ROOT/bin/sandboxd" --data-dir "$work/d" --socket "$work/s.sock" --images-dir "$IMAGES_DIR" \
	--init-path "$ROOT/bin/hiloop-init" --log-level warn 2>"$work/sandboxd.log" &
daemon_pid=$!
for _ in $(seq 100); do $hiloop version >/dev/null 2>&1 && break; sleep 0.05; done
$hiloop image build "$IMAGE" >/dev/null 2>&1

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

doc=docs/performance.md
start='<!-- bench/storage.sh:start -->'
end='<!-- bench/storage.sh:end -->'
block="$start
Measured $(date -u +%Y-%m-%d) on $(nproc) cores, $(uname -r), $RUNS runs each, through the CLI:

$table
$end"
python3 - "$doc" "$start" "$end" "$block" <<'PY'
import sys
path, start, end, block = sys.argv[1:]
text = open(path).read()
a, b = text.index(start), text.index(end) + len(end)
open(path, "w").write(text[:a] + block + text[b:])
PY
echo "wrote $doc"
