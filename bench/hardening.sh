#!/usr/bin/env bash
# Measures a change to the sandbox's isolation against the build before it, in one run, the two
# daemons side by side and their measurements interleaved (so that load from elsewhere falls on
# both alike):
#   - `hiloop sandbox create` → first `exec true`, and `exec true`
#   - 1 GiB written into /workspace with dd conv=fdatasync
#   - 4 million one-byte read+write syscalls (dd bs=1): what the seccomp filter costs a call
# Usage: BEFORE=DIR bench/hardening.sh [ROUNDS], DIR holding the earlier build's bin/ (for
# example `git worktree add /tmp/before REV && make -C /tmp/before build`). Run as root after
# `make build`. Prints a table; docs/performance.md records it by hand.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
rounds=${1:-40}
declare -A bin=([before]=${BEFORE:?set BEFORE to a tree with the earlier build in bin/}/bin [after]=$ROOT/bin)
work=$(mktemp -d /tmp/hlhard.XXXX)
chmod 711 "$work" # sandboxes' roots, unprivileged host ids, pass through it (user namespaces)
declare -A pids
cleanup() {
	set +e
	for v in before after; do
		h $v sandbox delete cx >/dev/null 2>&1
		h $v sandbox delete bench >/dev/null 2>&1
		[ -n "${pids[$v]:-}" ] && kill "${pids[$v]}" && wait "${pids[$v]}" 2>/dev/null
	done
	rm -rf "$work"
}
trap cleanup EXIT
h() { HILOOP_HOST=unix://$work/$1/s.sock "${bin[$1]}/hiloop" "${@:2}"; }
# us CMD... prints how long CMD took in microseconds.
us() { local t0; t0=$(date +%s%N); "$@" >/dev/null; echo $((($(date +%s%N) - t0) / 1000)); }

for v in before after; do
	mkdir -m 711 -p "$work/$v"
	"${bin[$v]}/sandboxd" --data-dir "$work/$v/d" --socket "$work/$v/s.sock" --images-dir "$IMAGES_DIR" \
		--init-path "${bin[$v]}/hiloop-init" --log-level warn 2>"$work/$v/sandboxd.log" &
	pids[$v]=$!
	for _ in $(seq 100); do h $v version >/dev/null 2>&1 && break; sleep 0.05; done
	h $v image build "$IMAGE" >/dev/null 2>&1
	h $v sandbox create bench --image "$IMAGE" >/dev/null
done
for _ in $(seq "$rounds"); do
	for v in before after; do
		h $v sandbox delete cx >/dev/null 2>&1 || true
		us bash -c "$(declare -f h); $(declare -p bin work); h $v sandbox create cx --image $IMAGE && h $v sandbox exec cx -- true" >>"$work/$v.create"
		for _ in 1 2 3; do us h $v sandbox exec bench -- true >>"$work/$v.exec"; done
	done
done
for _ in 1 2 3 4 5 6; do
	for v in before after; do
		h $v sandbox exec bench -- sh -c 'dd if=/dev/zero of=/workspace/f bs=1M count=1024 conv=fdatasync 2>&1 | tail -1; rm -f /workspace/f' >>"$work/$v.dd"
	done
done
for _ in 1 2 3 4; do
	for v in before after; do
		h $v sandbox exec bench -- sh -c 'dd if=/dev/zero of=/dev/null bs=1 count=2000000 2>&1 | tail -1' >>"$work/$v.sys"
	done
done

python3 - "$work" <<'PY'
import re, statistics as st, sys
work = sys.argv[1]
def nums(name, conv=float):
    return [conv(x) for x in open(f"{work}/{name}") if x.strip()]
def rate(line):  # dd's "1073741824 bytes (...) copied, 0.487512 s, 2.2 GB/s" in MB/s, from the
    # bytes and seconds: the rate dd prints has two digits, a step of 5% at 2 GB/s
    n, s = re.search(r"^([0-9]+) bytes .* copied, ([0-9.]+) s", line).groups()
    return int(n) / float(s) / 1e6
def secs(line):
    return float(re.search(r"copied, ([0-9.]+) s", line).group(1))
rows = [
    ("create → first exec, median ms", lambda v: st.median(nums(v + ".create")) / 1000),
    ("exec true, median ms", lambda v: st.median(nums(v + ".exec")) / 1000),
    # The first write into a fresh workspace allocates its blocks; the rest rewrite them.
    ("1 GiB into /workspace (fdatasync), median MB/s", lambda v: st.median([rate(l) for l in open(f"{work}/{v}.dd")])),
    ("4 M one-byte read+write, median s", lambda v: st.median([secs(l) for l in open(f"{work}/{v}.sys")])),
]
print("| measure | before | after | change |")
print("|---|---:|---:|---:|")
for name, f in rows:
    b, a = f("before"), f("after")
    print(f"| {name} | {b:.2f} | {a:.2f} | {100 * (a - b) / b:+.0f}% |")
PY
