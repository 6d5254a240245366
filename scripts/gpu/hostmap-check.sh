#!/usr/bin/env bash
# GPU check of bpftime's host-backed maps (types 1512 and 1513, issue 14):
# `gpubpf run -i 1 -j bpf/examples/host_map_bpfel.o` on vec_add, static and
# -cudart shared cudart, with numbers asserted:
#   - live: shared_counter[0] (1513) read at least twice with different
#     values strictly between 0 and its final value, i.e. while vec_add was
#     still launching (the tool reads the map in place, no agent copy);
#   - exact: shared_counter[0] = launches x threads, shared_counter[1] =
#     launches x threads with i < n (the count is atomic, nothing is lost);
#     per_thread (1512) key 0 (calls) = launches for every thread, key 2 =
#     the thread's id, and no slot for a thread that does not exist;
#   - the launches were instrumented, and the app's output (timings aside)
#     is the same as untraced;
#   - a CPU-shared map (1504) the GPU only adds to, gathered in device
#     memory: read live, exact at the end, and the same with
#     GPUBPF_SHARED_MAPS=direct (see the section at the end).
# vec_add runs 1000 elements on 4 x 256 threads (24 threads have no
# element) for HOSTMAP_ITER launches (default 50000); a traced run that
# ends within 4 s, too soon for two 1 s intervals, is run again with
# proportionally more launches. Prints "SUMMARY: ..." last.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
export PATH=$PWD/bin:$PATH
pass=0 fail=0 runs=""
ok() { echo "ok   $*"; pass=$((pass + 1)); }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }
need() { [ -e "$1" ] || { echo "missing $1 (make gpu-bundle here, make -C samples, make agent)"; exit 1; }; }
need bin/gpubpf; need bin/libgpubpf-agent.so; need samples/bin/vec_add; need samples/bin/vec_add_shared
need bpf/examples/host_map_bpfel.o; need bpf/bench/bench_shared.bpf.o

T=${GPUBPF_GPU_LOGS:-${OUT:-/tmp}/gpu-check}/hostmap
rm -rf "$T"; mkdir -p "$T"
N=1000 THR=256 BLK=4
THREADS=$((THR * BLK))
ACTIVE=$((N < THREADS ? N : THREADS))

# app_lines FILE: the app's own output (not the tool's JSON), timings dropped.
app_lines() {
	grep -av '^{' "$1" | grep -av '^Average' | sed -E 's/ host_us=[0-9.]+ kernel_us=[0-9.]+//'
}

# judge OUT: checks the JSON map lines of one traced run; prints one line
# "verdict|detail" per check.
judge() { python3 - "$1" "$LAUNCHES" "$THREADS" "$ACTIVE" <<'PY'
import json, sys
f, launches, threads, active = sys.argv[1], *map(int, sys.argv[2:5])
shared0 = []          # shared_counter[0], each read in order
last = {}             # (map, key) -> last value read
summary = {}
for line in open(f, errors="replace"):
    try: o = json.loads(line)
    except ValueError: continue
    if not isinstance(o, dict): continue
    if o.get("type") == "summary": summary = o
    if o.get("type") != "map": continue
    v = int(o["value"])
    last[(o["map"], o["key"])] = v
    if o["map"] == "shared_counter" and o["key"] == "0":
        shared0.append(v)
final0 = last.get(("shared_counter", "0"))
final1 = last.get(("shared_counter", "1"))
def out(good, what): print(("ok" if good else "bad") + "|" + what)
if final0 is None:
    out(False, "no shared_counter in the output"); sys.exit()
live = sorted({v for v in shared0[:-1] if 0 < v < final0})
out(len(live) >= 2, f"live: {len(shared0)} reads of shared_counter[0], {len(live)} distinct values while vec_add ran "
    f"({', '.join(map(str, live[:4]))}{' ...' if len(live) > 4 else ''}), final {final0}")
out(final0 == launches * threads and final1 == launches * active,
    f"shared_counter[0]={final0} (want {launches * threads} = {launches} launches x {threads} threads), "
    f"[1]={final1} (want {launches * active}, threads with i < n)")
calls, ids, durs, stray = {}, {}, [], []
for (m, k), v in last.items():
    if m != "per_thread": continue
    _, t, _, key = k.split()          # "thread T key K"
    t = int(t)
    if t >= threads: stray.append(t)
    if key == "0": calls[t] = v
    elif key == "1": durs.append(v)
    elif key == "2": ids[t] = v
wrong = [t for t in range(threads) if calls.get(t) != launches]
badid = [t for t in range(1, threads) if ids.get(t) != t]   # thread 0's id is 0: not printed
out(not wrong and not badid and not stray,
    f"per_thread: calls = {launches} for {threads - len(wrong)} of {threads} threads"
    + (f" (first wrong: thread {wrong[0]} has {calls.get(wrong[0])})" if wrong else "")
    + f", ids right for {threads - 1 - len(badid)} of {threads - 1}, {len(stray)} slots past the grid"
    + (f"; last run time median {sorted(durs)[len(durs) // 2]} ns" if durs else ""))
got = summary.get("instrumented_launches")
out(got == launches, f"instrumented launches {got} (want {launches})")
PY
}

# traced V: the traced run of samples/bin/V for ITER launches; sets rc, secs.
traced() {
	local t0
	t0=$(date +%s.%N)
	timeout --kill-after=10 120 gpubpf run -i 1 -j bpf/examples/host_map_bpfel.o -- samples/bin/"$1" $N "$ITER" $THR $BLK >"$T/$1.out" 2>"$T/$1.err"
	rc=$?
	secs=$(python3 -c "import time; print(f'{time.time() - $t0:.1f}')")
}

for v in vec_add vec_add_shared; do
	ITER=${HOSTMAP_ITER:-50000}
	traced $v
	if [ $rc -eq 0 ] && python3 -c "import sys; sys.exit(not $secs < 4)"; then
		ITER=$(python3 -c "import math; print(min(2000000, $ITER * math.ceil(6 / max($secs, 0.1))))")
		echo "note $v: $secs s traced is too short for live reads; again with $ITER launches"
		traced $v
	fi
	LAUNCHES=$((ITER + 1)) # vec_add launches once more to warm up
	timeout --kill-after=10 60 samples/bin/$v $N "$ITER" $THR $BLK >"$T/$v.base" 2>"$T/$v.base.err"
	if [ $rc -eq 0 ] && grep -aq "RESULT vec_add ok" "$T/$v.out"; then
		ok "$v: traced run rc 0 in ${secs}s, app RESULT ok"
	else
		bad "$v: traced run rc $rc in ${secs}s"; tail -n 5 "$T/$v.err"; grep -a RESULT "$T/$v.out"
	fi
	if diff <(app_lines "$T/$v.base") <(app_lines "$T/$v.out") >"$T/$v.diff" && grep -aq "RESULT vec_add ok" "$T/$v.base"; then
		ok "$v: app output same as untraced ($(app_lines "$T/$v.out" | wc -l) lines, timings aside)"
	else
		bad "$v: app output differs from untraced:"; head -n 10 "$T/$v.diff"
	fi
	while IFS='|' read -r verdict what; do
		if [ "$verdict" = ok ]; then ok "$v: $what"; else bad "$v: $what"; fi
	done < <(judge "$T/$v.out")
	runs+="$v $LAUNCHES launches ${secs}s; "
done
# A map shared with the CPU (1504) that the GPU only adds to
# (bpf/bench/bench_shared.bpf.o: each warp adds its lanes to slot SM % 64):
# gathered in device memory and folded into the kernel's map every 100 ms
# (issue 47). Live (read at -i 0.2 at two values or more between 0 and the
# end), exact (the slots sum to launches x threads), and the same sum with
# GPUBPF_SHARED_MAPS=direct (every add on the host link), both timed.
shared_sum() { python3 - "$1" <<'PY'
import json, sys
sums, cur, summary = [], {}, {}
for line in open(sys.argv[1], errors="replace"):
    try: o = json.loads(line)
    except ValueError: continue
    if not isinstance(o, dict): continue
    if o.get("type") == "summary": summary = o
    if o.get("type") == "map" and o.get("map") == "shared_counts":
        k = o["key"]
        if k in cur:            # a new read begins
            sums.append(sum(cur.values())); cur = {}
        cur[k] = int(o["value"])
if cur: sums.append(sum(cur.values()))
final = sums[-1] if sums else -1
live = sorted({v for v in sums[:-1] if 0 < v < final})
# "-" for none: read(1) would fold an empty field into the next
print(final, len(live), ",".join(summary.get("shared_maps_gathered") or []) or "-", summary.get("shared_map_folds", 0))
PY
}
SITER=${HOSTMAP_SHARED_ITER:-200000}
for mode in gathered direct; do
	env=()
	[ $mode = direct ] && env=(GPUBPF_SHARED_MAPS=direct)
	t0=$(date +%s.%N)
	timeout --kill-after=10 120 env "${env[@]}" gpubpf run -i 0.2 -j bpf/bench/bench_shared.bpf.o -- samples/bin/vec_add $N "$SITER" $THR $BLK >"$T/shared-$mode.out" 2>"$T/shared-$mode.err"
	src=$?
	ssecs=$(python3 -c "import time; print(f'{time.time() - $t0:.1f}')")
	read -r final live gathered folds < <(shared_sum "$T/shared-$mode.out")
	want=$(((SITER + 1) * THREADS))
	if [ $mode = gathered ]; then
		ok_if=$([ "$src" = 0 ] && [ "$final" = "$want" ] && [ "$gathered" = shared_counts ] && [ "${live:-0}" -ge 2 ] && [ "${folds:-0}" -gt 0 ] && echo 1)
	else
		ok_if=$([ "$src" = 0 ] && [ "$final" = "$want" ] && [ "$gathered" = - ] && echo 1)
	fi
	line="shared map ($mode): sum $final (want $want = $((SITER + 1)) launches x $THREADS threads), $live live values between 0 and the end, gathered [$gathered], $folds folds, ${ssecs}s"
	if [ -n "$ok_if" ]; then ok "$line"; else bad "$line (rc $src)"; tail -n 3 "$T/shared-$mode.err"; fi
	runs+="shared $mode ${ssecs}s; "
done

echo "SUMMARY: $pass ok, $fail failed (vec_add $N elements on $THREADS threads: ${runs%; })"
[ $fail = 0 ]
