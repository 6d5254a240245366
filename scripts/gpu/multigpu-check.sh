#!/usr/bin/env bash
# Several GPUs in one process (issue 45), on a GPU machine with 2 or more
# GPUs: samples/bin/multigpu gives device d 10*(d+1) launches of `work`
# (2048*(d+1) threads each) and 5 `tick`s queued behind a 1 ms kernel, from
# one host thread and from one host thread per GPU. Asserts, per device:
#   - threadhist --per-device: runs = launches x threads;
#   - kernelretsnoop --per-device: exits = launches x threads;
#   - kernel_trace: 10*(d+1) launch rows on device d, each of 2048*(d+1)
#     threads (no row mixes devices);
#   - launchlate --events: 5 tick launches per device, each after about the
#     1 ms kernel ahead of it; with --device 1 only device 1's.
# Exit status: 0 passed, 1 a check failed, 3 skipped (fewer than 2 GPUs).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
export PATH=$PWD/bin:$PATH
LOGS=${GPUBPF_GPU_LOGS:-${OUT:-/tmp}/gpu-check}/multigpu
rm -rf "$LOGS"
mkdir -p "$LOGS"
n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "${n:-0}" -lt 2 ]; then
	echo "skip: multigpu: this machine has ${n:-0} GPU(s); the check needs 2 or more"
	exit 3
fi
pass=0 fail=0
ok() { echo "ok   $*"; pass=$((pass + 1)); }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }
run() {
	local name=$1
	shift
	timeout --kill-after=5 180 "$@" >"$LOGS/$name.out" 2>"$LOGS/$name.err"
	echo $? >"$LOGS/$name.rc"
}
echo "multigpu-check: $(date -u +%Y-%m-%dT%H:%M:%SZ), $n GPUs: $(nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c | tr -s ' ' | tr '\n' ';')"

# verdict TOOL FILE [DEVICE...]: "ok ..." or "bad ..." from the tool's -j
# output against the sample's EXPECT lines in the same file (DEVICEs: the
# ones a --device run traces).
verdict() { python3 - "$@" <<'PY'
import collections, json, re, sys
tool, path = sys.argv[1], sys.argv[2]
DEVS = [int(d) for d in sys.argv[3:]] or range(64)
want, got, rows = {}, collections.Counter(), collections.defaultdict(list)
ticks = collections.defaultdict(list)
for line in open(path, errors="replace"):
    m = re.match(r"EXPECT device=(\d+) kernel=(\w+) launches=(\d+) threads=(\d+)", line)
    if m:
        want[(int(m[1]), m[2])] = (int(m[3]), int(m[4]))
        continue
    try:
        o = json.loads(line)
    except ValueError:
        continue
    if not isinstance(o, dict):
        continue
    k = o.get("mangled") or o.get("kernel", "")
    name = "work" if "work" in k else "tick" if "tick" in k else k
    dev = o.get("device")
    if tool == "threadhist" and o.get("type") == "kernel":
        got[(dev, name)] = o["runs"]
    elif tool == "kernelretsnoop" and o.get("type") == "kernel":
        got[(dev, name)] = o["exits"]
    elif tool == "kernel_trace" and o.get("type") == "launch":
        rows[(dev, name)].append(o["threads"])
    elif tool == "launchlate" and o.get("type") == "launch":
        ticks[(dev, name)].append(o["latency_ns"])
bad = []
for (dev, name), (launches, threads) in sorted(want.items()):
    if tool in ("threadhist", "kernelretsnoop") and name == "work":
        if got[(dev, name)] != launches * threads:
            bad.append(f"device {dev}: {got[(dev, name)]} (want {launches * threads})")
    if tool == "kernel_trace" and name == "work":
        r = rows[(dev, name)]
        if len(r) != launches or any(t != threads for t in r):
            bad.append(f"device {dev}: {len(r)} launches of {sorted(set(r))} threads (want {launches} of {threads})")
    if tool == "launchlate" and name == "tick" and dev in DEVS:
        t = ticks[(dev, name)]
        if len(t) != launches or sorted(t)[len(t) // 2] < 900_000:
            bad.append(f"device {dev}: {len(t)} ticks, median latency {sorted(t)[len(t) // 2] if t else 0} ns (want 5, about 1 ms)")
    if tool == "launchlate" and dev not in DEVS and ticks[(dev, name)]:
        bad.append(f"device {dev}: {len(ticks[(dev, name)])} launches of a device not asked for")
print(("bad " + "; ".join(bad)) if bad else "ok " + ", ".join(f"device {d} {n} {want[(d, n)][0]}x{want[(d, n)][1]}" for d, n in sorted(want) if n == "work"))
PY
}

for mode in serial threads; do
	run th-$mode threadhist --per-device -j -k work -- samples/bin/multigpu $mode
	run rs-$mode kernelretsnoop --per-device -j -k work -- samples/bin/multigpu $mode
	run kt-$mode kernel_trace -j --max-events 0 --launches 100 -k work -- samples/bin/multigpu $mode
	run ll-$mode launchlate -j --events -k tick -- samples/bin/multigpu $mode
	run ll1-$mode launchlate -j --events --device 1 -k tick -- samples/bin/multigpu $mode
	for t in th:threadhist rs:kernelretsnoop kt:kernel_trace ll:launchlate ll1:launchlate; do
		name=${t%%:*} tool=${t#*:}
		f=$LOGS/$name-$mode.out
		devs=()
		[ "$name" = ll1 ] && devs=(1)
		v=$(verdict "$tool" "$f" "${devs[@]}" 2>&1)
		if grep -aq "RESULT multigpu ok" "$f" && [[ "$v" == ok* ]]; then
			ok "$mode $tool${devs:+ --device ${devs[*]}}: ${v#ok }"
		else
			bad "$mode $tool${devs:+ --device ${devs[*]}}: ${v:-no verdict}; rc $(cat "$LOGS/$name-$mode.rc"): $(tail -2 "$LOGS/$name-$mode.err" | tr '\n' ' ' | cut -c1-300)"
		fi
	done
done
# What the tools print on a process using two GPUs (the README's view).
echo "== text views"
for v in "threadhist --per-device -k work" "kernelretsnoop --per-device -k work" "kernel_trace --max-events 0 --launches 30 -k work" "launchlate -k tick"; do
	echo "\$ sudo $v -- ./multigpu serial"
	# shellcheck disable=SC2086 # the tool's words
	timeout 120 $v -- samples/bin/multigpu serial 2>&1 | grep -av '^EXPECT\|^RESULT\|^device [0-9]*: \|^multigpu: ' | head -48
done
echo "SUMMARY: multigpu $pass ok, $fail failed ($n GPUs)"
[ $fail = 0 ]
