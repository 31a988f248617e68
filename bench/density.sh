#!/usr/bin/env bash
# Density: N idle sandboxes on one host (default 1000), created PAR at a time (default 20) with
# small workspaces. Measures, on a private sandboxd with its own data dir:
#   - the time to create all N, and to delete them
#   - host memory per sandbox: MemAvailable before/after, the sandboxes' memory cgroups, and the
#     inits' RSS and PSS (PSS is the fair one: the init binary's pages are shared by all)
#   - sandboxd's RSS, threads and open files
#   - `hiloop sandbox list` (hyperfine)
#   - a restart of sandboxd beside them: its stop (SIGTERM; the sandboxes run on), and its start
#     until it serves its socket again with every sandbox adopted
#   - loop devices, host mounts, kernel inodes and mounts in a sandbox's namespace, per sandbox
# then deletes everything and checks that no sandbox process, mount or loop device is left.
# Writes its table into docs/performance.md (WRITE=0 to only print it). Run as root after
# `make build`. At 1,000 sandboxes the promised storage (N × (WS_GIB + ROOTFS_GIB) GiB, sparse)
# exceeds most disks, so the daemon runs with --overcommit sized to fit.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
N=${N:-1000}
PAR=${PAR:-20}
WS_GIB=${WS_GIB:-1}
ROOTFS_GIB=${ROOTFS_GIB:-1}
MEMORY_MB=${MEMORY_MB:-256}
WRITE=${WRITE:-1}

command -v hyperfine >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq hyperfine >/dev/null; }

work=$(mktemp -d /tmp/hldensity.XXXX)
cleanup() {
	set +e
	if [ -n "${daemon_pid:-}" ]; then
		$hiloop sandbox list -o json 2>/dev/null | sed -n 's/^      "name": "\(.*\)",$/\1/p' |
			xargs -r -P "$PAR" -n 1 $hiloop sandbox delete >/dev/null 2>&1
		kill "$daemon_pid" && wait "$daemon_pid" 2>/dev/null
	fi
	grep " $work" /proc/mounts | awk '{print $2}' | sort -r | xargs -r -n 1 umount -l
	rm -rf "$work"
}
trap cleanup EXIT

kib() { awk -v k="$1" '$1 == k":" {print $2}' /proc/meminfo; }
# my_inits prints the pids of this daemon's sandbox inits (its children).
my_inits() { pgrep -P "$daemon_pid" -f '^/.hiloop/init' || true; }
loops() { losetup -a 2>/dev/null | grep -c "$work" || true; }
mounts() { grep -c " $work" /proc/mounts || true; }
inodes() { awk '{print $1 - $2}' /proc/sys/fs/inode-nr; }
daemon_stat() { awk -v k="$1" '$1 == k":" {print $2}' "/proc/$daemon_pid/status"; }
# cgroup_bytes sums the memory charged to this daemon's sandboxes' cgroups.
cgroup_bytes() {
	local pid=$1 rel base
	rel=$(awk -F: '$2 == "memory" || $2 == "" {print $3; exit}' "/proc/$pid/cgroup")
	base=$(dirname "$rel")
	local prefix
	prefix=$(basename "$rel" | sed 's/-[^-]*$/-/')
	if [ -d /sys/fs/cgroup/memory ]; then
		cat /sys/fs/cgroup/memory"$base"/"$prefix"*/memory.usage_in_bytes
	else
		cat /sys/fs/cgroup"$base"/"$prefix"*/memory.current
	fi | awk '{s += $1} END {print s}'
}

# The promises are sparse: overcommit so that N workspaces and root filesystems fit on paper.
free_gib=$(df -BG --output=avail /tmp | tail -1 | tr -dc 0-9)
overcommit=$(python3 -c "import math; print(min(100, max(1, math.ceil($N * ($WS_GIB + $ROOTFS_GIB) * 1.2 / $free_gib))))")
# No spare: the figures are the sandboxes' own (a spare is one idle sandbox more, ~3 MiB).
daemon_flags=(--overcommit "$overcommit" --spares 0)
start_daemon "${daemon_flags[@]}"
$hiloop sandbox create warm --image "$IMAGE" --workspace-gib "$WS_GIB" --rootfs-gib "$ROOTFS_GIB" --memory-mb "$MEMORY_MB" >/dev/null
$hiloop sandbox delete warm >/dev/null
sync
sleep 2

avail0=$(kib MemAvailable) slab0=$(kib SUnreclaim) loops0=$(loops) mounts0=$(mounts) inodes0=$(inodes)
rss0=$(daemon_stat VmRSS)

echo "creating $N sandboxes, $PAR at a time (--overcommit $overcommit)"
t0=$(date +%s.%N)
seq -f "d%04g" "$N" | xargs -P "$PAR" -I{} $hiloop sandbox create {} --image "$IMAGE" \
	--workspace-gib "$WS_GIB" --rootfs-gib "$ROOTFS_GIB" --memory-mb "$MEMORY_MB" >/dev/null 2>"$work/create.log" || true
t1=$(date +%s.%N)
create_s=$(echo "$t1 - $t0" | bc)
made=$(my_inits | wc -l)
echo "created $made in ${create_s}s"
[ "$made" -eq "$N" ] || { echo "only $made of $N sandboxes run:"; sort "$work/create.log" | uniq -c | sort -rn | head; }

sleep 5 # let the starts' transient allocations settle
avail1=$(kib MemAvailable) slab1=$(kib SUnreclaim) loops1=$(loops) mounts1=$(mounts) inodes1=$(inodes)
rss1=$(daemon_stat VmRSS) threads=$(daemon_stat Threads) fds=$(ls "/proc/$daemon_pid/fd" | wc -l)
pids=$(my_inits)
first=$(echo "$pids" | head -1)
read -r init_rss init_pss < <(for p in $pids; do cat "/proc/$p/smaps_rollup"; done |
	awk '$1 == "Rss:" {r += $2} $1 == "Pss:" {p += $2} END {print r, p}')
cg=$(cgroup_bytes "$first")
ns_mounts=$(wc -l <"/proc/$first/mountinfo")

hyperfine -N --runs 10 --warmup 2 --export-json "$work/list.json" \
	-n "hiloop sandbox list ($made sandboxes)" "$hiloop sandbox list" >/dev/null

t0=$(date +%s.%N)
kill "$daemon_pid" && wait "$daemon_pid" 2>/dev/null || true
t1=$(date +%s.%N)
run_daemon "${daemon_flags[@]}"
t2=$(date +%s.%N)
stop_s=$(echo "$t1 - $t0" | bc) restart_s=$(echo "$t2 - $t1" | bc)
adopted=$($hiloop sandbox list -o json | grep -c '"state": "running"' || true)
echo "restart: stop ${stop_s}s, start to serving ${restart_s}s, $adopted running"

t0=$(date +%s.%N)
$hiloop sandbox list -o json | sed -n 's/^      "name": "\(.*\)",$/\1/p' |
	xargs -r -P "$PAR" -n 1 $hiloop sandbox delete >/dev/null
t1=$(date +%s.%N)
delete_s=$(echo "$t1 - $t0" | bc)
left_procs=$(my_inits | wc -l) left_loops=$(loops)
kill "$daemon_pid" && wait "$daemon_pid" 2>/dev/null || true
daemon_pid=
sleep 1
left_mounts=$(mounts) left_loops_after=$(loops)

table=$(python3 - "$work/list.json" <<PY
import json, sys
n = $made or 1
mib = lambda kib: kib / 1024
lst = json.load(open(sys.argv[1]))["results"][0]
ms = sorted(t * 1000 for t in lst["times"])
rows = [
    ("sandboxes running", f"{$made} of {$N}", "1,000"),
    ("create all, {} at a time".format($PAR), f"{$create_s:.1f} s ({$create_s * 1000 / n:.1f} ms each)", "under 60 s"),
    ("host memory per sandbox (MemAvailable drop / N)", f"{mib(($avail0 - $avail1) / n):.2f} MiB", "under 3 MiB"),
    ("  of it unreclaimable kernel slab", f"{mib(($slab1 - $slab0) / n):.2f} MiB", ""),
    ("  charged to its memory cgroup", f"{$cg / n / 2**20:.2f} MiB", ""),
    ("  its init's RSS / PSS", f"{mib($init_rss / n):.2f} / {mib($init_pss / n):.2f} MiB", ""),
    ("sandboxd RSS (idle before → after)", f"{mib($rss0):.0f} → {mib($rss1):.0f} MiB, {$threads} threads, {$fds} fds", "under 150 MB"),
    ("hiloop sandbox list, median", f"{ms[len(ms) // 2]:.0f} ms", "under 100 ms"),
    ("sandboxd restart beside them: stop, start to serving", f"{$stop_s:.2f} s, {$restart_s:.2f} s ({$adopted} running after)", ""),
    ("loop devices per sandbox", f"{($loops1 - $loops0) / n:.2f}", ""),
    ("host mounts per sandbox", f"{($mounts1 - $mounts0) / n:.2f}", ""),
    ("mounts in a sandbox's namespace", f"{$ns_mounts}", ""),
    ("kernel inodes per sandbox (inode-nr)", f"{($inodes1 - $inodes0) / n:.0f}", ""),
    ("delete all, {} at a time".format($PAR), f"{$delete_s:.1f} s", ""),
    ("left after delete: processes, loops, mounts", f"{$left_procs}, {$left_loops_after}, {$left_mounts}", "0, 0, 0"),
]
print("| $N sandboxes | measured | target |")
print("|---|---:|---:|")
for r in rows:
    print("| " + " | ".join(r) + " |")
PY
)
echo "$table"
if [ "$left_procs$left_loops_after$left_mounts" != 000 ]; then
	echo "LEFT BEHIND: $left_procs processes, $left_loops_after loop devices, $left_mounts mounts" >&2
	exit 1
fi
[ "$WRITE" = 1 ] || exit 0
write_block "bench/density.sh N=$N" "Measured $(date -u +%Y-%m-%d) on $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 2^20}' /proc/meminfo), $(uname -r), image \`$IMAGE\`, \`--workspace-gib $WS_GIB --rootfs-gib $ROOTFS_GIB --memory-mb $MEMORY_MB\`, \`sandboxd --overcommit $overcommit\`, load average $(cut -d' ' -f1 /proc/loadavg) at the end:

$table"
