#!/usr/bin/env bash
# GPU event path benchmark (issue 10): one ring-buffer record per GPU thread
# (bpf/examples/trace_bpfel.o: block, thread, globaltimer; 40-byte records)
# on vec_add with bpftime's presets, as a new user runs it:
#   gpubpf run -j trace_bpfel.o -- samples/bin/vec_add PRESET
# Per preset, interleaved REPS times (median shown, min-max in brackets):
#   base     untraced vec_add
#   dev      device ring drained by the agent (the default design, 32 MiB ring
#            in 32 shards, a warp writing to shard (its index in the grid) mod 32)
#   one      the same ring as one shard (GPUBPF_RING_SHARDS=1: every warp of
#            the GPU on one control block, the design before sharding)
#   dev256   the same with --ring-mb 256 (a ring that holds a burst)
#   slot     dev with shards keyed by the warp's hardware slot, (%smid*8 +
#            %warpid) mod 32, instead of its index in the grid
#            (GPUBPF_RING_KEY=slot, the default before 2026-11-23's fifteenth
#            session: a grid of a few blocks used half the shards)
#   noprecheck dev without the plain-load check for a full ring before the
#            claim atomic (GPUBPF_RING_PRECHECK=0; pkg/runtime/jit's ringPrecheck)
#   dev64    the same with --ring-mb 64
#   norec    bpf/bench/probe_ring.bpf.o ring_record: the record without the
#            trace_printk from thread 0
#   fields   (not by default) probe_ring's ring_fields: the same fields read, no ring record
#            (a per-thread map update instead), so norec - fields is the ring
#   host     ring data in pinned host memory written by the GPU (GPUBPF_RING=host)
#   nobatch  dev with the agent making one driver call per copy of a drain
#            (GPUBPF_AGENT_DRAIN_BATCH=0) instead of one cuMemcpyBatchAsync
#            for the released positions and one for the data
#   VAR=VAL  dev with that environment variable (a measurement switch)
#   print    the default design with every record printed as JSON (-j) into a pipe
#   nodrop   dev with --no-drop (a warp that finds its shard full waits for
#            the tool to make room, up to 100 ms a record): the kernel slows
#            instead of dropping; its waits and give-ups are shown (issue 47)
# Reported: CUDA-event kernel time ratio to base, share of records delivered
# (delivered / produced, from the GPU's own counters), and whether
# produced = delivered + dropped held exactly. Every traced run must leave
# the app's RESULT line "ok".
# Goals: <= 1.5x at medium, <= 2x at every preset, >= 99% delivered at tiny
# and small (dev, --summary: records handed to the tool, not printed).
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/gpu/lib.sh # kus
export PATH=$PWD/bin:$PATH
OBJ=bpf/examples/trace_bpfel.o
REPS=${REPS:-3}
LIMIT=${LIMIT:-120}
MODES=${MODES:-"dev slot one noprecheck norec dev256 print"}
PRESETS=${PRESETS:-"tiny:32 10000 32 1;small:1000 10000 256 4;medium:10000 1000 256 40;large:100000 1000 512 196;xlarge:1000000 1000 512 1954"}
T=$(mktemp -d)
LOGS=${GPUBPF_GPU_LOGS:-${OUT:-/tmp}/gpu-check}
mkdir -p "$LOGS"
jf() { grep -ao "\"$2\":[0-9.]*" "$1" | tail -1 | cut -d: -f2; }
fail=0
stats() { # values... -> "median [min-max]"
	python3 - "$@" <<'EOF'
import sys, statistics
v = sorted(float(x) for x in sys.argv[1:] if x)
print(f"{statistics.median(v):.2f} [{v[0]:.2f}-{v[-1]:.2f}]" if v else "n/a")
EOF
}
ratio() { python3 -c "import statistics as s; b=s.median([$1]); print(' '.join(f'{x/b:.2f}' for x in [$2]))"; }
declare -A K D C DR
printf '%-7s %-7s %-22s %-26s %-18s %s\n' preset mode kernel_us ratio delivered exact
IFS=';' read -ra PS <<<"$PRESETS"
for ps in "${PS[@]}"; do
	name=${ps%%:*} P=${ps#*:}
	for rep in $(seq "$REPS"); do
		timeout "$LIMIT" samples/bin/vec_add $P >"$T/base" 2>&1
		K[$name.base]+="$(kus "$T/base"),"
		for mode in $MODES; do
			out=$T/$mode
			case $mode in
			dev) timeout "$LIMIT" gpubpf run -j --summary "$OBJ" -- samples/bin/vec_add $P >"$out" 2>"$out.err" ;;
			slot) GPUBPF_RING_KEY=slot timeout "$LIMIT" gpubpf run -j --summary "$OBJ" -- samples/bin/vec_add $P >"$out" 2>"$out.err" ;;
			one) GPUBPF_RING_SHARDS=1 timeout "$LIMIT" gpubpf run -j --summary "$OBJ" -- samples/bin/vec_add $P >"$out" 2>"$out.err" ;;
			noprecheck) GPUBPF_RING_PRECHECK=0 timeout "$LIMIT" gpubpf run -j --summary "$OBJ" -- samples/bin/vec_add $P >"$out" 2>"$out.err" ;;
			dev64) timeout "$LIMIT" gpubpf run -j --summary --ring-mb 64 "$OBJ" -- samples/bin/vec_add $P >"$out" 2>"$out.err" ;;
			norec) timeout "$LIMIT" gpubpf run -j --summary -P ring_record bpf/bench/probe_ring.bpf.o -- samples/bin/vec_add $P >"$out" 2>"$out.err" ;;
			fields) timeout "$LIMIT" gpubpf run -j --summary -P ring_fields bpf/bench/probe_ring.bpf.o -- samples/bin/vec_add $P >"$out" 2>"$out.err" ;;
			dev256) timeout "$LIMIT" gpubpf run -j --summary --ring-mb 256 "$OBJ" -- samples/bin/vec_add $P >"$out" 2>"$out.err" ;;
			*=*) env "$mode" timeout "$LIMIT" gpubpf run -j --summary "$OBJ" -- samples/bin/vec_add $P >"$out" 2>"$out.err" ;;
			nobatch) GPUBPF_AGENT_DRAIN_BATCH=0 timeout "$LIMIT" gpubpf run -j --summary "$OBJ" -- samples/bin/vec_add $P >"$out" 2>"$out.err" ;;
			nodrop) timeout "$LIMIT" gpubpf run -j --summary --no-drop "$OBJ" -- samples/bin/vec_add $P >"$out" 2>"$out.err" ;;
			host) GPUBPF_RING=host timeout "$LIMIT" gpubpf run -j --summary "$OBJ" -- samples/bin/vec_add $P >"$out" 2>"$out.err" ;;
			print) timeout "$LIMIT" gpubpf run -j "$OBJ" -- samples/bin/vec_add $P 2>"$out.err" |
				grep -aF -e RESULT -e '"type":"summary"' -e 'Average' >"$out" ;;
			esac
			rc=$?
			cp "$out" "$LOGS/event-$name-$mode-$rep.out" 2>/dev/null
			if ! grep -aq "RESULT vec_add ok" "$out"; then
				echo "FAIL $name $mode rep $rep (rc $rc): app RESULT not ok"; tail -n 5 "$out" "$out.err"; fail=1
			fi
			prod=$(jf "$out" records_produced) del=$(($(jf "$out" records) + $(jf "$out" printk_lines))) drop=$(jf "$out" records_dropped_gpu)
			disc=$(jf "$out" records_discarded) lost=$(jf "$out" records_lost_tool) pend=$(jf "$out" records_in_flight_bytes)
			exact=no
			if [ "$mode" = fields ]; then exact=n/a; elif [ -n "$prod" ] && [ "$prod" -gt 0 ] && [ "$prod" = $((del + drop + ${disc:-0} + ${lost:-0})) ] && [ "${pend:-0}" = 0 ]; then exact=yes; else
				echo "NOT EXACT $name $mode rep $rep: produced=$prod delivered=$del dropped=$drop discarded=$disc lost=$lost in_flight=$pend"; fail=1
			fi
			K[$name.$mode]+="$(kus "$out"),"
			D[$name.$mode]+="$(python3 -c "print(f'{100*${del:-0}/max(1,${prod:-0}):.2f}')"),"
			C[$name.$mode]+="$exact,"
			db=$(jf "$out" ring_drain_bytes)
			DR[$name.$mode]="$(jf "$out" ring_waits) warps waited ($(jf "$out" ring_wait_drops) gave up); $(jf "$out" ring_drains) drains copied $((${db:-0} / 1000000)) MB in $(jf "$out" ring_drain_ms) ms (agent $(jf "$out" ring_drain_agent_ms) ms, of it waiting for copies $(jf "$out" ring_drain_wait_ms) ms; agent busy before $(jf "$out" ring_drain_agent_busy_ms) ms (after its last reply $(jf "$out" ring_drain_agent_post_ms) ms), to the agent $(jf "$out" ring_drain_to_agent_ms) ms, back $(jf "$out" ring_drain_from_agent_ms) ms; then the tool scanning $(jf "$out" ring_drain_scan_ms) ms, delivering $(jf "$out" ring_drain_deliver_ms) ms)"
		done
	done
	b=${K[$name.base]%,}
	printf '%-7s %-7s %-22s %-26s %-18s %s\n' "$name" base "$(stats ${b//,/ })" 1.00 - -
	for mode in $MODES; do
		k=${K[$name.$mode]%,}
		rs=$(ratio "$b" "$k")
		printf '%-7s %-7s %-22s %-26s %-18s %s  (last run: %s)\n' "$name" "$mode" "$(stats ${k//,/ })" "$(stats $rs)" "$(stats ${D[$name.$mode]//,/ })%" "${C[$name.$mode]%,}" "${DR[$name.$mode]}"
		echo "$name $mode $(stats $rs | cut -d' ' -f1) $(stats ${D[$name.$mode]//,/ } | cut -d' ' -f1)" >>"$T/summary"
	done
done
goal() { python3 - "$T/summary" <<'EOF'
import sys
rows = [l.split() for l in open(sys.argv[1])]
r = {(p, m): (float(x), float(d)) for p, m, x, d in rows}
bad = []
for (p, m), (x, d) in r.items():
    if m not in ("dev", "dev256"):  # slot is measured beside dev, not held to the goals
        continue
    if x > 2.0: bad.append(f"{p} x{x:.2f} > 2")
    if p == "medium" and x > 1.5: bad.append(f"medium x{x:.2f} > 1.5")
    if p in ("tiny", "small") and d < 99: bad.append(f"{p} delivered {d:.1f}% < 99%")
dev = ", ".join(f"{p} {m} x{x:.2f} {d:.1f}%" for (p, m), (x, d) in r.items() if m.startswith("dev"))
print(("goals met" if not bad else "MISSED: " + "; ".join(bad)) + " | dev: " + dev)
EOF
}
g=$(goal)
echo "SUMMARY: $g"
[ $fail = 0 ]
