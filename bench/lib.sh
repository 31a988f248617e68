# Shared by the bench scripts: source it after cd to the repo root.
ROOT=$PWD
IMAGES_DIR=${IMAGES_DIR:-/var/cache/hiloop-test/images}
IMAGE=${IMAGE:-minimal}
hiloop=$ROOT/bin/hiloop

# start_daemon [sandboxd flags...] starts a private sandboxd on $work and waits for it; it
# sets HILOOP_HOST and daemon_pid and builds (or reuses) the test image.
start_daemon() {
	# Sandboxes' roots, unprivileged host ids, pass through it to their root filesystems.
	chmod 711 "$work"
	export HILOOP_HOST=unix://$work/s.sock
	run_daemon "$@"
	$hiloop image build "$IMAGE" >/dev/null 2>&1
}

# run_daemon [sandboxd flags...] starts sandboxd on $work's data dir (again, after a stop) and
# waits up to 300 s for it to serve its socket; it sets daemon_pid.
run_daemon() {
	"$ROOT/bin/sandboxd" --data-dir "$work/d" --socket "$work/s.sock" --images-dir "$IMAGES_DIR" \
		--init-path "$ROOT/bin/hiloop-init" --log-level warn "$@" 2>>"$work/sandboxd.log" &
	daemon_pid=$!
	local deadline=$((SECONDS + 300))
	until $hiloop version >/dev/null 2>&1; do
		kill -0 "$daemon_pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ] || return 1
		sleep 0.01
	done
}

# free_ports N prints N distinct TCP ports of 127.0.0.1 the kernel just handed out, so that a run
# never depends on a fixed port being free.
free_ports() {
	python3 - "$1" <<'PY'
import socket, sys
held = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in held:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in held))
PY
}

# names reads a list's JSON (`-o json` of a list command) on stdin and prints its items' names.
names() {
	python3 -c 'import json, sys
doc = json.load(sys.stdin)
items = doc if isinstance(doc, list) else next((v for v in doc.values() if isinstance(v, list)), [])
print("\n".join(i["name"] for i in items))' 2>/dev/null
}

# stop_daemon deletes every sandbox and snapshot, then stops the daemon.
stop_daemon() {
	for n in $($hiloop sandbox list -o json 2>/dev/null | names); do
		$hiloop sandbox delete --with-snapshots "$n" >/dev/null
	done
	for s in $($hiloop sandbox snapshot list -o json 2>/dev/null | names); do
		$hiloop sandbox snapshot delete "$s" >/dev/null
	done
	[ -n "${daemon_pid:-}" ] && kill "$daemon_pid" && wait "$daemon_pid" 2>/dev/null
}

# write_block NAME TEXT replaces the block between <!-- NAME:start --> and <!-- NAME:end --> in
# docs/performance.md with TEXT.
write_block() {
	python3 - docs/performance.md "<!-- $1:start -->" "<!-- $1:end -->" "$2" <<'PY'
import sys
path, start, end, text = sys.argv[1:]
doc = open(path).read()
a, b = doc.index(start), doc.index(end)
open(path, "w").write(doc[:a] + start + "\n" + text + "\n" + doc[b:])
PY
	echo "wrote docs/performance.md"
}
