#!/usr/bin/env bash
# Measures `hiloop chat` in a real terminal (tmux, 100x30) against a real sandboxd and the fake
# harness:
#   - a 10,000-update turn (internal/harness/fake/testdata/chatty.fake): frames written per second
#     (bubbletea coalesces renders; target: at most 60), the delay from the turn_end event reaching
#     the chat to the next frame on the terminal (target: 100 ms), and the chat's CPU time (user +
#     sys) next to `hiloop session prompt -o json` following the same kind of turn
#   - opening a session with 100,000 stored events: time from the chat's start to the first frame
#     after the history is replayed (target: 1 s), and the chat's max RSS
# The chat's HILOOP_CHAT_TRACE file gives the times; /usr/bin/time gives CPU and RSS. Writes the
# table into docs/performance.md. Run as root after `make build`; needs tmux and GNU time.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
RUNS=${RUNS:-3}

work=$(mktemp -d /tmp/hlchat.XXXX)
tmux_sock=$work/tmux
tm() { tmux -S "$tmux_sock" -f "$work/tmux.conf" "$@"; }
printf "set -g remain-on-exit on\nset -g status off\n" >"$work/tmux.conf"
cleanup() {
	set +e
	tm kill-server 2>/dev/null
	stop_daemon
	rm -rf "$work"
}
trap cleanup EXIT

# wait_screen PANE REGEXP polls the pane until it matches (a bench may wait; a test may not time).
wait_screen() {
	for _ in $(seq 1200); do
		tm capture-pane -p -t "$1" | grep -Eq "$2" && return 0
		sleep 0.05
	done
	echo "pane $1 never showed $2:" >&2
	tm capture-pane -p -S - -t "$1" | grep -v "^$" >&2; cat "$work"/*.trace 2>/dev/null | head -5 >&2
	return 1
}

# wait_file PATH waits until /usr/bin/time has written its line.
wait_file() {
	for _ in $(seq 600); do [ -s "$1" ] && return 0; sleep 0.05; done
	echo "no $1" >&2
	return 1
}

# chat NAME SESSION TRACE TIMES runs hiloop chat on SESSION in a new pane, traced and timed.
chat() {
	tm new-session -d -s "$1" -x 100 -y 30 \
		"env TERM=xterm-256color NO_COLOR=1 HILOOP_HOST=$HILOOP_HOST HILOOP_CHAT_TRACE=$3 /usr/bin/time -o $4 -f '%U %S %M' $hiloop chat bench --session $2"
}

start_daemon
tm new-session -d -s keep -x 100 -y 30 # the server outlives the chats' panes
$hiloop sandbox create bench --image "$IMAGE" >/dev/null
$hiloop sandbox exec -i bench -- sh -c 'cat > /workspace/chatty.fake' <internal/harness/fake/testdata/chatty.fake
updates=$(grep -Eo '^repeat [0-9]+' internal/harness/fake/testdata/chatty.fake | awk '{n += $2} END {print n}')

# A 10,000-update turn in the chat, then the same turn followed by `session prompt -o json`.
for run in $(seq "$RUNS"); do
	sid=$($hiloop session new bench --harness fake)
	$hiloop session prompt "$sid" "warm up" >/dev/null
	chat "turn$run" "$sid" "$work/turn$run.trace" "$work/turn$run.time"
	wait_screen "turn$run" live
	tm send-keys -t "turn$run" 'run chatty.fake' Enter
	until $hiloop session get "$sid" -o json | grep -q '"state": "idle"' && grep -q turn_end "$work/turn$run.trace"; do sleep 0.1; done
	sleep 0.5 # let the last frames land
	tm send-keys -t "turn$run" C-d
	wait_file "$work/turn$run.time"
	/usr/bin/time -o "$work/prompt$run.time" -f '%U %S %M' $hiloop session prompt "$sid" "run chatty.fake" -o json >/dev/null
done

# A session with 100,000 stored events: ten chatty turns.
sid=$($hiloop session new bench --harness fake)
for _ in $(seq 10); do $hiloop session prompt "$sid" "run chatty.fake" -o json >/dev/null; done
stored=$($hiloop session get "$sid" -o json | sed -n 's/^  "last_seq": \([0-9]*\),$/\1/p')
for run in $(seq "$RUNS"); do
	chat "open$run" "$sid" "$work/open$run.trace" "$work/open$run.time"
	until grep -q history_done "$work/open$run.trace" 2>/dev/null; do sleep 0.05; done
	wait_screen "open$run" live
	sleep 0.5
	tm send-keys -t "open$run" C-d
	wait_file "$work/open$run.time"
done

table=$(python3 - "$work" "$RUNS" "$updates" "$stored" <<'PY'
import statistics, sys
work, runs, updates, stored = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])

def trace(path):
    return [(int(l.split()[0]), l.split()[1:]) for l in open(path)]

def cpu(path):
    u, s, rss = open(path).read().split()[-3:]
    return float(u) + float(s), int(rss)

def med(xs, fmt):
    xs = sorted(xs)
    m = statistics.median(xs)
    return fmt(m) if xs[0] == xs[-1] else f"{fmt(m)} ({fmt(xs[0])}–{fmt(xs[-1])})", m

fps, end_ms, chat_cpu, prompt_cpu, batches = [], [], [], [], []
for r in range(1, runs + 1):
    t = trace(f"{work}/turn{r}.trace")
    frames = [ts for ts, f in t if f[0] == "frame"]
    evs = [(ts, f) for ts, f in t if f[0] == "events"]
    end = next(ts for ts, f in evs if "turn_end" in f)
    first_live = next(ts for ts, f in t if f[0] == "history_done")
    during = [ts for ts in frames if first_live <= ts <= end + 100_000_000]
    # The most frames in any one-second window of the turn.
    best, j = 0, 0
    for i in range(len(during)):
        while during[i] - during[j] > 1_000_000_000:
            j += 1
        best = max(best, i - j + 1)
    fps.append(best)
    after = [ts for ts in frames if ts >= end]
    end_ms.append((after[0] - end) / 1e6 if after else float("inf"))
    batches.append(sum(1 for ts, f in evs if ts > first_live))
    chat_cpu.append(cpu(f"{work}/turn{r}.time")[0])
    prompt_cpu.append(cpu(f"{work}/prompt{r}.time")[0])

first, rss = [], []
for r in range(1, runs + 1):
    t = trace(f"{work}/open{r}.trace")
    start = t[0][0]
    done = next(ts for ts, f in t if f[0] == "history_done")
    frame = next(ts for ts, f in t if f[0] == "frame" and ts >= done)
    first.append((frame - start) / 1e9)
    rss.append(cpu(f"{work}/open{r}.time")[1] / 1024)

def row(what, xs, fmt, target=None, below=True):
    s, m = med(xs, fmt)
    if target is None:
        print(f"| {what} | {s} | context | |")
        return
    ok = m <= target if below else m >= target
    print(f"| {what} | {s} | {'≤ ' if below else '≥ '}{fmt(target)} | {'yes' if ok else '**no**'} |")

n = lambda x: f"{x:,.0f}"
ms = lambda x: f"{x:.1f}"
sec = lambda x: f"{x:.2f}"
print("| figure | measured, median (range) | target | met |")
print("|---|---:|---:|:-:|")
row(f"a {updates:,}-update turn in the chat: most frames written in one second", fps, n, 60)
row("the same turn: event batches the model took (one Update each)", batches, n)
row("the same turn: turn_end reaching the chat → next frame on the terminal, ms", end_ms, ms, 100)
row("the same turn: CPU (user + sys) of `hiloop chat`, s", chat_cpu, sec)
row("the same turn: CPU (user + sys) of `hiloop session prompt -o json`, s", prompt_cpu, sec)
row(f"opening a session of {stored:,} stored events: start → first frame after the history, s", first, sec, 1.0)
row(f"opening a session of {stored:,} stored events: max RSS of `hiloop chat`, MiB", rss, n)
PY
)
echo "$table"

write_block bench/chat.sh "Measured $(date -u +%Y-%m-%d) on $(nproc) cores, $(uname -r); $RUNS runs each in tmux at 100x30, image \`$IMAGE\`:

$table"
