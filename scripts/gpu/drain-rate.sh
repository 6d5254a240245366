#!/usr/bin/env bash
# Ring delivery in steady state (issue 47, item 2): how many records a second
# the drain hands to the tool while a kernel streams one 40-byte record per
# thread for seconds (event-bench's presets run for a few ms, so they show the
# first fill of the ring, not the rate it drains at).
#
#   bash scripts/gpu/drain-rate.sh
#   CONFIGS="r32::--ring-mb=32 t8:GPUBPF_SCAN_THREADS=8:--ring-mb=256" ITERS=200000 bash scripts/gpu/drain-rate.sh
#
# Workload: vec_add medium (10000 elements, 256 x 40 threads: 10240 records a
# launch) for ITERS launches; untraced first, then each config
# NAME:ENV=VAL,...:FLAG,... (environment and gpubpf run flags, each list
# comma-separated, either empty) with GPUBPF_DRAIN_TRACE=1. From the drain lines of
# the records ring: the window from the first drain that consumed records to
# the last, and what was consumed in it; delivered/s = consumed / window.
# Also the whole run's produced / delivered / dropped (exact check), the
# kernel-time ratio, the drain's parts summed (agent copy wait, round trip,
# scan, deliver), and the CPU and page faults of the tool and the program it
# started together (/usr/bin/time counts a command's children).
# Last line: SUMMARY: per config, delivered M records/s and GB/s, drop %.
set -uo pipefail
export LC_ALL=C
cd "$(dirname "$0")/../.." || exit 1
. scripts/gpu/lib.sh # kus
export PATH=$PWD/bin:$PATH
OBJ=${OBJ:-bpf/examples/trace_bpfel.o}
ITERS=${ITERS:-100000}
PRESET=${PRESET:-"10000 $ITERS 256 40"}
CONFIGS=${CONFIGS:-"r32::--ring-mb=32 r256::--ring-mb=256"}
LIMIT=${LIMIT:-120}
LOGS=${GPUBPF_GPU_LOGS:-${OUT:-/tmp}/gpu-check}/drain-rate
mkdir -p "$LOGS"
fail=0
TIME=()
[ -x /usr/bin/time ] && TIME=(/usr/bin/time -v)

timeout "$LIMIT" samples/bin/vec_add $PRESET >"$LOGS/base.out" 2>&1
base=$(kus "$LOGS/base.out")
echo "base: vec_add $PRESET, kernel ${base} us"
summary=""
for c in $CONFIGS; do
	IFS=: read -r name e f <<<"$c"
	envs=() flags=()
	[ -n "$e" ] && IFS=, read -ra envs <<<"$e"
	[ -n "$f" ] && IFS=, read -ra flags <<<"$f"
	out=$LOGS/$name.out err=$LOGS/$name.err
	env GPUBPF_DRAIN_TRACE=1 "${envs[@]}" timeout "$LIMIT" "${TIME[@]}" gpubpf run -j --summary "${flags[@]}" "$OBJ" -- samples/bin/vec_add $PRESET >"$out" 2>"$err"
	rc=$?
	grep -aq "RESULT vec_add ok" "$out" || { echo "FAIL $name: vec_add's RESULT not ok (rc $rc)"; tail -n 5 "$err"; fail=1; }
	line=$(python3 - "$out" "$err" "$base" "$(kus "$out")" "$name" <<'PY'
import json, re, sys
out, err, base, k, name = sys.argv[1:6]
s = {}
for l in open(out, errors="replace"):
    try: o = json.loads(l)
    except ValueError: continue
    if isinstance(o, dict) and o.get("type") == "summary": s = o
t, cons = [], []
for l in open(err, errors="replace"):
    m = re.search(r"drain pid=\d+ ring=(\S+) t=(\d+) rtt=(\d+) scan=(\d+) deliver=(\d+) copied=(\d+) produced=(\d+) dropped=(\d+) consumed=(\d+)", l)
    if m and m.group(1) != "(printk)":
        t.append(int(m.group(2)) + int(m.group(3))); cons.append(int(m.group(9)))
first = next((i for i, c in enumerate(cons) if c), None)
last = max((i for i, c in enumerate(cons) if c), default=None)
rate = 0.0
if first is not None and last > first:
    # records consumed by the drains after the first, over the time since it
    rate = sum(cons[first + 1:last + 1]) / ((t[last] - t[first]) / 1e6)
def f(k): return s.get(k, 0) or 0
prod, rec, drop = f("records_produced"), f("records") + f("printk_lines"), f("records_dropped_gpu")
exact = prod == rec + drop + f("records_discarded") + f("records_lost_tool") and f("records_in_flight_bytes") == 0
faults = re.search(r"Minor .*page faults.*: (\d+)", open(err, errors="replace").read())
cpu = re.findall(r"(User|System) time \(seconds\): ([0-9.]+)", open(err, errors="replace").read())
ratio = float(k) / float(base) if k and base else float("nan")
print(f"{name}: x{ratio:.2f} kernel; steady {rate/1e6:.0f} M records/s ({rate*40/1e9:.1f} GB/s) over {(t[last]-t[first])/1e3 if first is not None and last else 0:.0f} ms; "
      f"produced {prod} = delivered {rec} + dropped {drop} ({100*drop/max(prod,1):.1f}%) {'exact' if exact else 'NOT EXACT'}; "
      f"{f('ring_drains')} drains copied {f('ring_drain_bytes')/1e9:.2f} GB: round trips {f('ring_drain_ms'):.0f} ms (agent {f('ring_drain_agent_ms'):.0f}, copies {f('ring_drain_wait_ms'):.0f}, busy before {f('ring_drain_agent_busy_ms'):.0f}), "
      f"scan {f('ring_drain_scan_ms'):.0f} ms, deliver {f('ring_drain_deliver_ms'):.0f} ms; tool and app CPU {sum(float(v) for _, v in cpu):.2f} s, {faults.group(1) if faults else '?'} minor faults"
      f"|{rate/1e6:.0f}|{100*drop/max(prod,1):.1f}|{int(exact)}")
PY
)
	echo "${line%%|*}"
	IFS='|' read -r _ mrate dpct ex <<<"$line"
	[ "$ex" = 1 ] || fail=1
	summary+="$name ${mrate}M/s ${dpct}% dropped; "
done
echo "SUMMARY: vec_add medium x $ITERS: ${summary%; } (goal >= 500 M records/s, drops < 50%)"
[ $fail = 0 ]
