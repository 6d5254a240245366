#!/usr/bin/env bash
# GPU checks of the runtime (issue 6), driven through `gpubpf run` the way a
# user runs it:
#   1. a kernel-entry/exit counting program on vec_add, static and shared
#      cudart: the app's RESULT stays ok (its __constant__ d_N/d_scale and
#      __device__ d_calls are read through the clone) and the counts equal
#      ITERATIONS x THREADS x BLOCKS;
#   2. attach to a running vec_add (agent preloaded), detach, re-attach;
#   3. kill -9 the tool while attached: the app runs on and stays correct;
#   4. the stub-hook variant and a trace_printk/ring-buffer program;
#   5. a PyTorch script under the agent: kernels listed, results right;
#   6. tool start -> first instrumented launch latency and JIT share.
# Prints "SUMMARY: ..." last.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PATH=$PWD/bin:$PATH
AGENT=$PWD/bin/libgpubpf-agent.so
pass=0 fail=0
ok() { echo "ok   $*"; pass=$((pass + 1)); }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }
need() { [ -x "$1" ] || { echo "missing $1 (make gpu-bundle here, make -C samples, make agent)"; exit 1; }; }
need bin/gpubpf; need samples/bin/vec_add; [ -f "$AGENT" ] || { echo "missing $AGENT"; exit 1; }

. scripts/gpu/lib.sh # map_value, summary_field

T=${GPUBPF_GPU_LOGS:-$(mktemp -d)}/runtime
rm -rf "$T"; mkdir -p "$T"
ITER=20 THR=256 BLK=16
WANT=$(((ITER + 1) * THR * BLK)) # vec_add launches once to warm up

# 1. counter on vec_add, both cudart flavours
for v in vec_add vec_add_shared; do
	gpubpf run -j bpf/examples/counter_bpfel.o -- samples/bin/$v 4096 $ITER $THR $BLK >"$T/$v.out" 2>"$T/$v.err"
	rc=$?
	entry=$(map_value "$T/$v.out" calls 0) exit_=$(map_value "$T/$v.out" calls 1)
	launches=$(summary_field "$T/$v.out" instrumented_launches)
	if [ $rc -eq 0 ] && grep -q "RESULT vec_add ok" "$T/$v.out" && [ "$entry" = "$WANT" ] && [ "$exit_" = "$WANT" ]; then
		ok "$v: counter entry=$entry exit=$exit_ (want $WANT), launches=$launches, app RESULT ok"
	else
		bad "$v: rc=$rc entry=$entry exit=$exit_ (want $WANT) launches=$launches"; tail -n 5 "$T/$v.out" "$T/$v.err"
		# Again with the agent's and the tool's diagnostics, to see why.
		GPUBPF_AGENT_DEBUG=1 gpubpf run -v -j bpf/examples/counter_bpfel.o -- samples/bin/$v 4096 $ITER $THR $BLK >"$T/$v.debug.out" 2>"$T/$v.debug.err"
		echo "-- diagnostics (rc $?):"; grep -v '"type":"map"' "$T/$v.debug.err" | tail -n 25
	fi
	grep -h 'first_attach_ms' "$T/$v.out" | tail -1
done

# 4a. stub-hook variant: the entry probe runs at the hook call
gpubpf run -j bpf/examples/counter_bpfel.o -- samples/bin/vec_add_hook 4096 $ITER $THR $BLK >"$T/hook.out" 2>"$T/hook.err"
e=$(map_value "$T/hook.out" calls 0)
if grep -q "RESULT vec_add_hook ok" "$T/hook.out" && [ "$e" != missing ] && [ "$e" -gt 0 ]; then ok "vec_add_hook: entry probe at stub ran $e times"; else bad "vec_add_hook: entry=$e"; tail -n 5 "$T/hook.out" "$T/hook.err"; fi

# 4b. ring buffer + trace_printk
gpubpf run -j bpf/examples/trace_bpfel.o -- samples/bin/vec_add 1024 2 128 2 >"$T/trace.out" 2>"$T/trace.err"
nrec=$(grep -c '"type":"record"' "$T/trace.out") npk=$(grep -c '"type":"printk"' "$T/trace.out")
drops=$(summary_field "$T/trace.out" records_dropped_gpu)
# 3 launches (warm-up + 2) x 128 x 2 threads; one printk per launch
if grep -q "RESULT vec_add ok" "$T/trace.out" && [ "$nrec" -eq $((3 * 128 * 2)) ] && [ "$npk" -eq 3 ]; then
	ok "trace: $nrec ring records (want 768), $npk printk lines (want 3), drops=$drops"
else
	bad "trace: records=$nrec (want 768) printk=$npk (want 3) drops=$drops"; tail -n 5 "$T/trace.out" "$T/trace.err"
fi
grep -m2 '"type":"record"' "$T/trace.out"; grep -m1 '"type":"printk"' "$T/trace.out"

# 2. attach to a running process, detach, re-attach
LD_PRELOAD=$AGENT samples/bin/vec_add 4096 3000000 $THR $BLK >"$T/long.out" 2>&1 &
app=$!
sleep 1.5
for round in 1 2; do
	gpubpf run -j -p $app -d 1 bpf/examples/counter_bpfel.o >"$T/attach$round.out" 2>"$T/attach$round.err"
	n=$(map_value "$T/attach$round.out" calls 0)
	pa=$(summary_field "$T/attach$round.out" first_attach_ms) pj=$(summary_field "$T/attach$round.out" jit_ms)
	if [ "$n" != missing ] && [ "$n" -gt 0 ] && [ $((n % (THR * BLK))) -eq 0 ]; then ok "attach round $round: $n entries counted in 1 s; first probe $pa ms after start (JIT $pj ms)"; else bad "attach round $round: calls[0]=$n"; tail -n 3 "$T/attach$round.err"; fi
done
# 3. kill -9 the tool while attached
gpubpf run -p $app bpf/examples/counter_bpfel.o >/dev/null 2>&1 &
tool=$!
sleep 1
kill -9 $tool
wait $tool 2>/dev/null
sleep 0.5
kill -0 $app 2>/dev/null && ok "app alive after kill -9 of the tool" || bad "app died after kill -9 of the tool"
kill -INT $app 2>/dev/null; sleep 0.3; kill -TERM $app 2>/dev/null
wait $app 2>/dev/null
# A shorter run to prove results stay right after an attach/kill cycle:
LD_PRELOAD=$AGENT samples/bin/vec_add 4096 200000 $THR $BLK >"$T/kill.out" 2>&1 &
app=$!
sleep 0.8
gpubpf run -p $app bpf/examples/counter_bpfel.o >/dev/null 2>&1 &
tool=$!
sleep 0.7
kill -9 $tool
wait $app
if grep -q "RESULT vec_add ok" "$T/kill.out"; then ok "results correct after kill -9 of the attached tool"; else bad "after kill -9: $(tail -n 2 "$T/kill.out")"; fi

# 5. PyTorch under the agent
if python3 -c 'import torch' 2>/dev/null; then
	cat >"$T/t.py" <<'PY'
import torch, time
x = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
y = (x * 2 + 1).sum().item()
want = float(sum(range(1 << 20))) * 2 + (1 << 20)
assert abs(y - want) / want < 1e-5, (y, want)
print("RESULT torch ok", y)
time.sleep(20)
PY
	LD_PRELOAD=$AGENT python3 "$T/t.py" >"$T/torch.out" 2>&1 &
	tp=$!
	for i in $(seq 1 600); do grep -q RESULT "$T/torch.out" && break; sleep 0.1; done
	gpubpf kernels -p $tp >"$T/torch.kernels" 2>&1
	krc=$?
	kill $tp 2>/dev/null; wait $tp
	trc=0; grep -q "RESULT torch ok" "$T/torch.out" || trc=1
	nk=$(grep -c . "$T/torch.kernels")
	if [ $trc -eq 0 ] && grep -q "RESULT torch ok" "$T/torch.out" && [ $krc -eq 0 ] && [ "$nk" -gt 2 ]; then
		ok "PyTorch under the agent: RESULT ok, $nk lines of kernel listing"
	else
		bad "PyTorch: app rc=$trc kernels rc=$krc lines=$nk"; tail -n 3 "$T/torch.out" "$T/torch.kernels"
	fi
	head -12 "$T/torch.kernels"
fi

# 6. a driver-API program making its own contexts (the agent's cuCtxCreate
# wrappers, direct and through cuGetProcAddress) runs unchanged
if nvcc -o "$T/ctxcreate" pkg/runtime/agent/gputest/ctxcreate.c -lcuda 2>"$T/ctxcreate.build"; then
	if LD_PRELOAD=$AGENT "$T/ctxcreate" >"$T/ctxcreate.out" 2>&1 && grep -q "CTX OK" "$T/ctxcreate.out"; then
		ok "cuCtxCreate (direct and via cuGetProcAddress) with the agent preloaded"
	else
		bad "cuCtxCreate with the agent: $(tail -n 2 "$T/ctxcreate.out")"
	fi
else
	bad "building ctxcreate.c: $(tail -n 3 "$T/ctxcreate.build")"
fi

# 6b. loops whose bounds come from data, in probes (issue 44): the loop
# budget. A probe whose loop runs K times, K a map value: every one of the
# 4096 threads' sums exact; a probe whose loop never ends: each thread
# spends its budget once per launch, counted exactly, and vec_add's result
# stays right.
LOOPS=pkg/runtime/verify/testdata/loops.bpf.o
LAUNCHES=$((ITER + 1))
timeout 300 gpubpf run -j --program map_bounded_probe "$LOOPS" -- samples/bin/vec_add 4096 $ITER $THR $BLK >"$T/budget-map.out" 2>"$T/budget-map.err"
rc=$?
chk=$(python3 - "$T/budget-map.out" $((THR * BLK)) $LAUNCHES <<'PY'
import json, sys
f, n, launches = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
h = 0
for k in range(40):
    h = (h * 31 + k) % (1 << 64)
want = (h * launches) % (1 << 64)
want = want - (1 << 64) if want >= 1 << 63 else want  # out holds s64
got = {}
for line in open(f):
    try: o = json.loads(line)
    except ValueError: continue
    if o.get("type") == "map" and o.get("map") == "out":
        got[int(o["key"])] = int(o["value"])
bad = [k for k in range(n) if got.get(k) != want]
spent = next((json.loads(l).get("loop_budget_spent") for l in open(f) if '"type":"summary"' in l), None)
print(("ok" if not bad and spent == 0 else "bad") + f" {n - len(bad)}/{n} slots = {want}; budget spent {spent}")
PY
)
if [ $rc -eq 0 ] && grep -q "RESULT vec_add ok" "$T/budget-map.out" && [[ "$chk" == ok* ]]; then
	ok "a probe's loop bounded by a map value (K=40) on vec_add: ${chk#ok }"
else
	bad "map-bounded probe loop: rc=$rc $chk; $(tail -n 2 "$T/budget-map.err" | tr '\n' ' ')"
fi
timeout 300 gpubpf run -j --loop-budget 4096 --program endless_probe "$LOOPS" -- samples/bin/vec_add 4096 $ITER $THR $BLK >"$T/budget-endless.out" 2>"$T/budget-endless.err"
rc=$?
spent=$(summary_field "$T/budget-endless.out" loop_budget_spent)
timeout 300 gpubpf run --loop-budget 4096 --program endless_probe "$LOOPS" -- samples/bin/vec_add 4096 $ITER $THR $BLK >"$T/budget-endless-text.out" 2>"$T/budget-endless-text.err"
if [ $rc -eq 0 ] && grep -q "RESULT vec_add ok" "$T/budget-endless.out" && [ "$spent" = $((LAUNCHES * THR * BLK)) ] &&
	grep -q "probe calls stopped by their loop budget" "$T/budget-endless-text.err"; then
	ok "a probe's endless loop: every thread left through its budget, $spent counted (want $((LAUNCHES * THR * BLK))), vec_add's result right; said: $(grep -ao '[0-9]* probe calls stopped by their loop budget' "$T/budget-endless-text.err")"
else
	bad "endless probe loop: rc=$rc spent=$spent (want $((LAUNCHES * THR * BLK))); $(tail -n 2 "$T/budget-endless.err" "$T/budget-endless-text.err" | tr '\n' ' ')"
fi

# (The agent's idle cost is measured by agent-check.sh: median of 7 alternating runs.)
# 7. two GPUs: one clone and one set of maps per device
if [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" -ge 2 ]; then
	nvcc -O2 -arch=sm_90 -o "$T/vecadd" pkg/runtime/agent/gputest/vecadd.cu
	gpubpf run -j -k _Z9vectorAddPKfS0_Pf bpf/examples/counter_bpfel.o -- "$T/vecadd" 1048576 10 0 multi >"$T/multi.out" 2>"$T/multi.err"
	rc=$?
	per_dev=$(python3 - "$T/multi.out" <<'PY'
import json, sys
seen = {}
for line in open(sys.argv[1]):
    try: o = json.loads(line)
    except ValueError: continue
    if o.get("type") == "map" and o.get("map") == "calls" and o.get("key") == "0":
        seen[o["device"]] = o["value"]
print(" ".join(f"gpu{d}={v}" for d, v in sorted(seen.items())))
PY
)
	if [ $rc -eq 0 ] && grep -q "RESULT PASS" "$T/multi.out" && [ "$(echo "$per_dev" | wc -w)" -ge 2 ] && ! echo "$per_dev" | grep -q '=0\b'; then
		ok "two GPUs: entry counts per device: $per_dev; app RESULT PASS"
	else
		bad "two GPUs: rc=$rc counts: $per_dev"; tail -n 5 "$T/multi.out" "$T/multi.err"
	fi
	# -p on a program that uses GPU 0 only: the tool must not open a
	# context on GPU 1 (maps and clones go where the program works).
	LD_PRELOAD=$AGENT samples/bin/vec_add 4096 3000000 $THR $BLK >"$T/one.out" 2>&1 &
	app=$!
	sleep 1.5
	gpubpf run -j -p $app -d 3 bpf/examples/counter_bpfel.o >"$T/one.tool" 2>"$T/one.err" &
	tool=$!
	sleep 2
	ngpu=$(nvidia-smi --query-compute-apps=pid,gpu_uuid --format=csv,noheader | grep -c "^$app,")
	wait $tool
	n=$(map_value "$T/one.tool" calls 0)
	devs=$(grep '"type":"map"' "$T/one.tool" | grep -o '"device":[0-9]*' | sort -u | tr '\n' ' ')
	kill -INT $app 2>/dev/null; sleep 0.3; kill -TERM $app 2>/dev/null; wait $app 2>/dev/null
	if [ "$ngpu" = 1 ] && [ "$n" != missing ] && [ "$n" -gt 0 ] && [ "$devs" = '"device":0 ' ]; then
		ok "-p on a one-GPU program of a two-GPU host: contexts of the program on $ngpu GPU while attached, maps on $devs, $n entries"
	else
		bad "-p on a one-GPU program: the program has contexts on $ngpu GPUs while attached (want 1), maps on $devs, calls=$n"; tail -n 3 "$T/one.err"
	fi
else
	echo "skip: one GPU here; the two-GPU check needs a machine with two"
fi

FA=$(summary_field "$T/vec_add.out" first_attach_ms) JIT=$(summary_field "$T/vec_add.out" jit_ms)
PA=$(summary_field "$T/attach1.out" first_attach_ms) PJ=$(summary_field "$T/attach1.out" jit_ms)
echo "SUMMARY: $pass passed, $fail failed; first probe after start: -p ${PA} ms (JIT ${PJ}), -- CMD ${FA} ms (JIT ${JIT})"
[ $fail -eq 0 ]
