#!/usr/bin/env bash
# launchlate against CUPTI, launch by launch (issue 12, deliverable 5), on
# the GPU machine. A CUPTI activity tracer (scripts/gpu/cupti, built here
# with nvcc) is injected into samples/bin/launch_story while launchlate
# traces it with -j --events; CUPTI's kernel starts are in CLOCK_MONOTONIC,
# the clock of launchlate's launch stamps. Joined by (pid, grid id):
#   - launchlate prints one launch line per timed start (its summary's
#     "timed" count);
#   - >= 99% of launchlate's timed launches are in CUPTI's records;
#   - for >= 99% of those, |launchlate gpu_ns - CUPTI start| <= bound_ns:
#     launchlate's latency and CUPTI's start minus the same cpu_ns agree
#     within launchlate's clock error bound.
# Also printed: the median and p99 of the difference, the bound, the share
# within the bound once the median offset is taken out (CUPTI's start is
# not the first thread's: a systematic offset shows there), and per kernel
# CUPTI's p50 latency next to launchlate's. Static and shared cudart, after
# a run of the tracer alone (so a CUPTI failure is told from a launchlate
# one).
# Needs bin/launchlate, samples/bin/launch_story{,_shared} (make gpu-bundle)
# and nvcc with CUPTI. Exit status: 0 all passed, 1 a check failed, 3 skipped
# (no CUPTI or nvcc here: one "skip:" line says why).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
export PATH=$PWD/bin:$PATH
LOGS=${GPUBPF_GPU_LOGS:-${OUT:-/tmp}/gpu-check}/launchlate-cupti
rm -rf "$LOGS"; mkdir -p "$LOGS"
ARGS=(200 500)
pass=0 fail=0
ok() { echo "ok   $*"; pass=$((pass + 1)); }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }
summary() { echo "SUMMARY: $pass ok, $fail failed${1:+ | $1}"; }
[ -x bin/launchlate ] || { echo "missing bin/launchlate (make gpu-bundle)"; exit 1; }
# (grep -q would stop reading at the first match and, under pipefail, the
# help's SIGPIPE would fail the test)
grep -q -- '--events' <<<"$(bin/launchlate --help 2>&1)" || { echo "bin/launchlate has no --events: rebuild it from this tree (make gpu-bundle)"; exit 1; }
echo "launchlate-cupti: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1); nvcc $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*')"

run() {
	local name=$1; shift
	timeout --kill-after=5 180 "$@" >"$LOGS/$name.out" 2>"$LOGS/$name.err"
	echo $? >"$LOGS/$name.rc"
}
result_ok() { grep -aq "RESULT $2[a-z_]* ok" "$LOGS/$1.out"; }

scripts/gpu/cupti/build.sh >"$LOGS/build.txt" 2>&1
brc=$?
sed 's/^/  /' "$LOGS/build.txt"
case $brc in
0) ;;
2) echo "skip: CUPTI cross-check: $(tail -1 "$LOGS/build.txt")"; exit 3 ;;
*) bad "building the CUPTI tracer: $(tail -1 "$LOGS/build.txt")"; summary; exit 1 ;;
esac
LIB=$PWD/scripts/gpu/cupti/libcupti_trace.so

# The tracer alone: CUPTI works here, the app runs unharmed with it, and
# its timestamps are CLOCK_MONOTONIC (CUPTI's default, CLOCK_REALTIME, is
# decades away from it): the last kernel started seconds ago on that clock.
run alone env CUDA_INJECTION64_PATH="$LIB" CUPTI_TRACE_OUT="$LOGS/alone.cupti" samples/bin/launch_story "${ARGS[@]}"
read -r n age <<<"$(python3 - "$LOGS/alone.cupti" <<'PY' 2>/dev/null
import sys, time
starts = [int(l.split()[1].partition("=")[2]) for l in open(sys.argv[1]) if l.startswith("grid=")]
print(len(starts), f"{(time.monotonic_ns() - max(starts)) / 1e9:.1f}" if starts else "none")
PY
)"
if result_ok alone launch_story && [ "${n:-0}" -gt 0 ] && python3 -c 'import sys; sys.exit(not 0 <= float(sys.argv[1]) < 600)' "$age" 2>/dev/null; then
	ok "CUPTI alone: $n kernel records, app ok; the last start $age s before now on CLOCK_MONOTONIC"
else
	bad "CUPTI alone: '${n:-0}' kernel records (last start '${age:-none}' s before now on CLOCK_MONOTONIC, want 0-600), rc $(cat "$LOGS/alone.rc"); $(grep -a 'cupti_trace' "$LOGS/alone.err" | head -3 | tr '\n' ' ')app: $(tail -1 "$LOGS/alone.out")"
fi

# crosscheck LAUNCHLATE_OUT CUPTI_FILE NAME: prints "CHECK ok|bad TEXT" lines for
# the assertions, indented lines for the numbers, "RESULT ..." last.
crosscheck() { python3 - "$@" <<'PY'
import json, sys
from collections import defaultdict

llf, cuf, name = sys.argv[1:4]
launches, summ = [], None
for line in open(llf, errors="replace"):
    if not line.startswith("{"):
        continue  # the app's own output
    try:
        o = json.loads(line)
    except ValueError:
        continue
    if o.get("type") == "launch":
        launches.append(o)
    elif o.get("type") == "summary":
        summ = o
recs = []
for line in open(cuf, errors="replace"):
    if not line.startswith("grid="):
        continue
    head, _, kname = line.rstrip("\n").partition(" name=")
    try:
        r = dict(kv.split("=", 1) for kv in head.split())
        recs.append({"grid": int(r["grid"]), "start": int(r["start"]), "end": int(r["end"]), "pid": int(r["pid"]),
                     "dev": int(r["dev"]), "stream": int(r["stream"]), "name": kname})
    except (KeyError, ValueError):
        pass

def pct(v, q):
    """Nearest-rank percentile of a non-empty list."""
    s = sorted(v)
    return s[min(len(s) - 1, max(0, int(round(q / 100 * len(s) + 0.5)) - 1))]

def us(ns):
    return f"{ns / 1e3:.1f} us"

def check(good, text):
    print(("CHECK ok " if good else "CHECK bad ") + text)

timed = summ.get("timed") if summ else None
check(timed is not None and timed == len(launches),
      f"{name}: {len(launches)} launch lines, summary counts {timed} timed")
if not launches or not recs:
    check(False, f"{name}: nothing to join ({len(launches)} launchlate launches, {len(recs)} CUPTI records)")
    print("RESULT joined=0 within=0")
    sys.exit(0)

# A context's grid ids are unique per launch, except a graph's kernel,
# which keeps its grid id at every replay: such groups are paired in the
# order the kernels ran (launchlate's gpu_ns, CUPTI's start; the story's
# replays are a synchronize apart, far more than any error here) when both
# sides have the same count, else each to the nearest start.
ll_pids = {o["pid"] for o in launches}
cu_pids = {r["pid"] for r in recs}
pidmap = {}
if not ll_pids & cu_pids and len(ll_pids) == 1 and len(cu_pids) == 1:
    pidmap = {next(iter(cu_pids)): next(iter(ll_pids))}
    print(f"  note: CUPTI's pid {next(iter(cu_pids))} is not launchlate's {next(iter(ll_pids))} (PID namespaces?); joined as one")
L, C = defaultdict(list), defaultdict(list)
for o in launches:
    L[(o["pid"], o["grid"])].append(o)
for r in recs:
    C[(pidmap.get(r["pid"], r["pid"]), r["grid"])].append(r)
pairs, by_rank, by_near = [], 0, 0
for k, ls in L.items():
    cs = C.get(k)
    if not cs:
        continue
    if len(ls) == 1 and len(cs) == 1:
        pairs.append((ls[0], cs[0]))
        continue
    ls = sorted(ls, key=lambda o: o["gpu_ns"])
    cs = sorted(cs, key=lambda r: r["start"])
    if len(ls) == len(cs):
        pairs += zip(ls, cs)
        by_rank += len(ls)
        continue
    for o in ls:
        pairs.append((o, min(cs, key=lambda r: abs(r["start"] - o["gpu_ns"]))))
        by_near += 1
n = len(launches)
joined = len(pairs)
print(f"  {name}: launchlate {n} timed launches; CUPTI {len(recs)} kernel records in pid(s) {sorted(cu_pids)}; "
      f"{len(recs) - len({id(c) for _, c in pairs})} CUPTI records with no launchlate launch (kernels it did not time)")
print(f"  joined {joined}/{n} by (pid, grid id); of them {by_rank} repeated grid ids (graph replays) paired in run order, {by_near} to the nearest start")
check(joined >= 0.99 * n, f"{name}: {joined}/{n} ({100 * joined / n:.1f}%) of launchlate's timed launches found in CUPTI's records (want >= 99%)")
missing = [o for o in launches if (o["pid"], o["grid"]) not in C]
if missing:
    kinds = defaultdict(int)
    for o in missing:
        kinds[o["kernel"] + (" (graph)" if o["graph"] else "")] += 1
    print("  not in CUPTI, by kernel: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))
    ex = missing[0]
    near = [r for r in recs if r["name"] == ex["mangled"]]
    near.sort(key=lambda r: abs(r["start"] - ex["gpu_ns"]))
    if near:
        r = near[0]
        print(f"  e.g. launchlate grid {ex['grid']} ({ex['mangled']}, gpu_ns {ex['gpu_ns']}): CUPTI's nearest {r['name']} "
              f"has grid {r['grid']}, start {r['start']} ({us(r['start'] - ex['gpu_ns'])} away)")
if not pairs:
    print("RESULT joined=0 within=0")
    sys.exit(0)

badname = [(o, r) for o, r in pairs if r["name"] != o["mangled"]]
print(f"  names: {joined - len(badname)}/{joined} joined launches have CUPTI's name = launchlate's mangled name"
      + (f"; e.g. {badname[0][0]['mangled']} vs {badname[0][1]['name']}" if badname else ""))
diff = [o["gpu_ns"] - r["start"] for o, r in pairs]
bound = [o["bound_ns"] for o, _ in pairs]
within = sum(abs(d) <= b for d, b in zip(diff, bound))
med = pct(diff, 50)
within_off = sum(abs(d - med) <= b for d, b in zip(diff, bound))
print(f"  launchlate gpu_ns - CUPTI start: median {med} ns, p1 {pct(diff, 1)} ns, p99 {pct(diff, 99)} ns, "
      f"p99 of |diff| {pct([abs(d) for d in diff], 99)} ns; bound_ns median {pct(bound, 50)}, max {max(bound)}")
print(f"  CUPTI's end - start (kernel time): median {pct([r['end'] - r['start'] for _, r in pairs], 50)} ns; "
      f"CUPTI start before launchlate's first thread in {sum(d > 0 for d in diff)}/{joined}")
check(within >= 0.99 * joined, f"{name}: {within}/{joined} ({100 * within / joined:.1f}%) agree within the bound "
      f"(|gpu_ns - CUPTI start| <= bound_ns; want >= 99%); median offset {med} ns")
print(f"  with the median offset {med} ns taken out: {within_off}/{joined} ({100 * within_off / joined:.1f}%) within the bound")

print(f"  {'KERNEL':<28} {'N':>5} {'launchlate p50':>15} {'CUPTI p50':>12} {'diff p50':>10} {'diff p99':>10}")
per = defaultdict(list)
for (o, r), d in zip(pairs, diff):
    per[o["kernel"] + (" (graph)" if o["graph"] else "")].append((o["latency_ns"], r["start"] - o["cpu_ns"], d))
story = ["idleTick", "queuedTick", "graphTick (graph)", "streamMark"]
for k in story + sorted(set(per) - set(story)):
    v = per.get(k)
    if not v:
        print(f"  {k:<28} {0:>5} (none joined)")
        continue
    print(f"  {k:<28} {len(v):>5} {us(pct([x[0] for x in v], 50)):>15} {us(pct([x[1] for x in v], 50)):>12} "
          f"{pct([x[2] for x in v], 50):>7} ns {pct([x[2] for x in v], 99):>7} ns")
print(f"RESULT joined={100 * joined / n:.1f}% within={100 * within / joined:.1f}% median_offset_ns={med} "
      f"p99_diff_ns={pct(diff, 99)} bound_ns={pct(bound, 50)}")
PY
}

res=""
# Static and shared cudart with the agent's stamps (the default), static
# with --uprobe's stamps.
for cfg in ":" "_shared:" ":--uprobe"; do
	v=${cfg%%:*} flag=${cfg#*:}
	bin=samples/bin/launch_story$v
	[ -n "$flag" ] && v+=_uprobe
	c=$LOGS/story$v.cupti
	# launchlate passes its environment on to the app; it loads no CUDA
	# itself, so the tracer is injected into the app alone.
	# shellcheck disable=SC2086
	run story$v env CUDA_INJECTION64_PATH="$LIB" CUPTI_TRACE_OUT="$c" launchlate $flag -j --events -- $bin "${ARGS[@]}"
	grep -a 'cupti_trace' "$LOGS/story$v.err" | sed "s/^/  story$v: /"
	if ! result_ok story$v launch_story; then
		bad "launch_story$v under launchlate + CUPTI: rc $(cat "$LOGS/story$v.rc"), app: $(tail -1 "$LOGS/story$v.out"); $(tail -2 "$LOGS/story$v.err" | tr '\n' ' ')"
		continue
	fi
	rc=$(cat "$LOGS/story$v.rc")
	[ "$rc" = 0 ] || echo "  launchlate exited $rc: $(tail -1 "$LOGS/story$v.err")"
	crosscheck "$LOGS/story$v.out" "$c" "launch_story$v" >"$LOGS/join$v.txt" 2>&1
	while IFS= read -r line; do
		case $line in
		"CHECK ok "*) ok "${line#CHECK ok }" ;;
		"CHECK bad "*) bad "${line#CHECK bad }" ;;
		RESULT*) res+="launch_story$v ${line#RESULT }; "; echo "  $line" ;;
		*) echo "$line" ;;
		esac
	done <"$LOGS/join$v.txt"
	grep -q '^RESULT' "$LOGS/join$v.txt" || bad "launch_story$v: the join failed: $(tail -1 "$LOGS/join$v.txt")"
done
summary "${res%; }"
[ "$fail" = 0 ]
