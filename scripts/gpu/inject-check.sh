#!/usr/bin/env bash
# GPU checks of attaching to CUDA programs started WITHOUT the agent
# (issue 16): the tool loads the agent with ptrace (pkg/inject), the agent
# swaps the driver entry points cudart cached (late interposition) and
# learns kernels at their first launch, the tool finds their PTX in the
# files the process maps.
#   1. gpubpf run (counter) -p on vec_add started 10 s earlier, static and
#      shared cudart: counts exact (entries = exits = instrumented launches x
#      threads), the app's RESULT ok, it runs on after the tool exits;
#   2. again on the same process (the agent is there: no second load);
#   3. kill -9 of the tool while attached: the app runs on, RESULT ok;
#   4. threadhist -p and launchlate -p on a fresh process;
#   5. attach time (tool start -> first instrumented launch) and how long the
#      injected thread was stopped (goals 150 ms and 20 ms);
#   6. a PyTorch script started without the agent: gpubpf kernels -p lists
#      kernels (from the files it maps), gpubpf run -p attaches; a torch C++
#      extension built with PTX is instrumented with exact counts.
# Prints "SUMMARY: ..." last.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PATH=$PWD/bin:$PATH
pass=0 fail=0
ok() { echo "ok   $*"; pass=$((pass + 1)); }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }
need() { [ -x "$1" ] || { echo "missing $1 (make gpu-bundle here, make -C samples, make agent)"; exit 1; }; }
need bin/gpubpf; need samples/bin/vec_add
. scripts/gpu/lib.sh # map_value, summary_field
T=${GPUBPF_GPU_LOGS:-$(mktemp -d)}/inject
rm -rf "$T"; mkdir -p "$T"
THR=256 BLK=16
stops=() attaches=()

for v in vec_add vec_add_shared; do
	[ -x samples/bin/$v ] || { bad "$v: not built"; continue; }
	# long enough to outlive every attach below (~40 s); no LD_PRELOAD
	samples/bin/$v 4096 3000000 $THR $BLK >"$T/$v.app" 2>&1 &
	app=$!
	sleep 10
	timeout 30 gpubpf run -j -p $app -d 2 bpf/examples/counter_bpfel.o >"$T/$v.1.out" 2>"$T/$v.1.err"
	rc=$?
	e=$(map_value "$T/$v.1.out" calls 0) x=$(map_value "$T/$v.1.out" calls 1) l=$(summary_field "$T/$v.1.out" instrumented_launches)
	st=$(grep -o 'stopped [0-9.]* ms' "$T/$v.1.err" | grep -o '[0-9.]*' | head -1)
	at=$(summary_field "$T/$v.1.out" first_attach_ms)
	stops+=("${st:-?}") attaches+=("$at")
	if [ $rc -eq 0 ] && grep -q "had no gpubpf agent: loaded" "$T/$v.1.err" && [ "$e" != missing ] && [ "$l" != missing ] &&
		[ "$l" -gt 0 ] && [ "$e" -eq $((l * THR * BLK)) ] && [ "$x" -eq "$e" ]; then
		ok "$v -p (no agent at start): loaded (thread stopped $st ms), $l launches instrumented, entries=$e exits=$x (= launches x $((THR * BLK))), first probe $at ms after start"
	else
		bad "$v -p: rc=$rc entries=$e exits=$x launches=$l"; tail -n 5 "$T/$v.1.err"
	fi
	timeout 30 gpubpf run -j -p $app -d 1 bpf/examples/counter_bpfel.o >"$T/$v.2.out" 2>"$T/$v.2.err"
	e2=$(map_value "$T/$v.2.out" calls 0) l2=$(summary_field "$T/$v.2.out" instrumented_launches)
	if ! grep -q "had no gpubpf agent" "$T/$v.2.err" && [ "$e2" != missing ] && [ "$l2" != missing ] && [ "$e2" -eq $((l2 * THR * BLK)) ] && [ "$l2" -gt 0 ]; then
		ok "$v: second attach uses the agent already there: $l2 launches, entries=$e2"
	else
		bad "$v: second attach: entries=$e2 launches=$l2"; tail -n 5 "$T/$v.2.err"
	fi
	timeout 30 gpubpf run -p $app bpf/examples/counter_bpfel.o >/dev/null 2>&1 &
	tool=$!
	sleep 1.5
	kill -9 $tool; wait $tool 2>/dev/null
	sleep 0.5
	if kill -0 $app 2>/dev/null; then ok "$v: app alive after kill -9 of the attached tool"; else bad "$v: app died after kill -9 of the tool"; fi
	kill -INT $app 2>/dev/null; sleep 0.5; kill -TERM $app 2>/dev/null; wait $app 2>/dev/null
	# results: a shorter run, attached and detached in its middle
	samples/bin/$v 4096 300000 $THR $BLK >"$T/$v.res" 2>&1 &
	app=$!
	sleep 3
	timeout 30 gpubpf run -p $app -d 1 bpf/examples/counter_bpfel.o >/dev/null 2>"$T/$v.res.err"
	wait $app
	if grep -q "RESULT vec_add ok" "$T/$v.res"; then ok "$v: RESULT ok after an injected attach"; else bad "$v: $(tail -n 2 "$T/$v.res")"; fi
done

# 4. the tools
if [ -x bin/threadhist ] && [ -x bin/launchlate ]; then
	samples/bin/vec_add 4096 3000000 $THR $BLK >"$T/tools.app" 2>&1 &
	app=$!
	sleep 5
	for t in threadhist launchlate; do
		timeout 40 $t -p $app -d 2 >"$T/$t.out" 2>"$T/$t.err"
		rc=$?
		if [ $rc -eq 0 ] && [ -s "$T/$t.out" ]; then ok "$t -p on a process started without the agent: $(grep -c . "$T/$t.out") lines"; else bad "$t -p: rc=$rc"; tail -n 5 "$T/$t.err"; fi
	done
	head -n 30 "$T/threadhist.out" "$T/launchlate.out"
	kill -INT $app 2>/dev/null; sleep 0.5; kill -TERM $app 2>/dev/null; wait $app 2>/dev/null
fi

# 6. PyTorch
if python3 -c 'import torch' 2>/dev/null; then
	cat >"$T/t.py" <<'PY'
import os, sys, torch, time
x = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
end = time.time() + 200 # or sooner: the check touches the stop file when done attaching
while time.time() < end and not os.path.exists(sys.argv[1]):
    y = (x * 2 + 1).sum().item()
print("RESULT torch", y == float((1 << 20) * (1 << 20) + (1 << 20) - (1 << 20)), flush=True)
PY
	python3 "$T/t.py" "$T/torch.stop" >"$T/torch.app" 2>&1 &
	app=$!
	sleep 15
	timeout 120 gpubpf kernels -p $app >"$T/torch.kernels" 2>&1
	n=$(grep -cE '│ (yes|no) ' "$T/torch.kernels")
	if [ "$n" -gt 0 ]; then ok "torch: gpubpf kernels -p lists $n kernel lines without an agent"; else bad "torch: kernels -p: $(tail -n 3 "$T/torch.kernels")"; fi
	timeout 60 gpubpf run -j -p $app -d 3 -k '*elementwise*' bpf/examples/counter_bpfel.o >"$T/torch.run" 2>"$T/torch.err"
	rc=$? l=$(summary_field "$T/torch.run" instrumented_launches)
	if [ $rc -eq 0 ] && grep -q "had no gpubpf agent: loaded" "$T/torch.err"; then ok "torch: gpubpf run -p loaded the agent, $l launches instrumented (kernels with PTX only)"; else bad "torch: run -p rc=$rc"; tail -n 5 "$T/torch.err"; fi
	touch "$T/torch.stop"
	wait $app
	grep -q "RESULT torch" "$T/torch.app" && ok "torch: script finished after the attach: $(grep RESULT "$T/torch.app")" || bad "torch: $(tail -n 2 "$T/torch.app")"

	# A torch C++ extension built with PTX: its kernel is instrumented
	# with exact counts (1024 threads per launch).
	cat >"$T/ext.py" <<'PY'
import os, sys, time, torch
from torch.utils.cpp_extension import load_inline
cuda = r"""
__global__ void gpubpf_ext_add(float *x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] += 1.0f; }
void ext_add(torch::Tensor x) { gpubpf_ext_add<<<4, 256>>>(x.data_ptr<float>(), x.numel()); }
"""
m = load_inline("gpubpf_ext", cpp_sources="void ext_add(torch::Tensor x);", cuda_sources=cuda, functions=["ext_add"],
                extra_cuda_cflags=["-gencode=arch=compute_%d%d,code=compute_%d%d" % (torch.cuda.get_device_capability() * 2)],
                build_directory=sys.argv[1], verbose=False)
x = torch.zeros(1024, device="cuda")
print("READY", flush=True)
n = 0
end = time.time() + 30
while time.time() < end:
    m.ext_add(x); n += 1
    if n % 100 == 0: torch.cuda.synchronize()
torch.cuda.synchronize()
print("RESULT ext", n, bool((x == n).all().item()), flush=True)
PY
	mkdir -p "$T/ext"
	python3 "$T/ext.py" "$T/ext" >"$T/ext.app" 2>&1 &
	app=$!
	for _ in $(seq 600); do grep -q READY "$T/ext.app" && break; sleep 0.5; done # the extension builds first
	sleep 3
	timeout 60 gpubpf run -j -p $app -d 3 -k gpubpf_ext_add bpf/examples/counter_bpfel.o >"$T/ext.run" 2>"$T/ext.err"
	rc=$? e=$(map_value "$T/ext.run" calls 0) l=$(summary_field "$T/ext.run" instrumented_launches)
	if [ $rc -eq 0 ] && [ "$e" != missing ] && [ "$l" != missing ] && [ "$l" -gt 0 ] && [ "$e" -eq $((l * 1024)) ]; then
		ok "torch extension with PTX, no agent at start: $l launches instrumented, entries=$e (= launches x 1024)"
	else
		bad "torch extension: rc=$rc entries=$e launches=$l"; tail -n 5 "$T/ext.err" "$T/ext.app"
	fi
	wait $app
	grep -q "RESULT ext [0-9]* True" "$T/ext.app" && ok "torch extension: results right after the attach" || bad "torch extension: $(tail -n 2 "$T/ext.app")"
fi

echo "SUMMARY: inject $pass ok, $fail failed; thread stopped ms: ${stops[*]:-none} (goal < 20); tool start -> first probe ms: ${attaches[*]:-none} (goal <= 150)"
[ $fail -eq 0 ]
