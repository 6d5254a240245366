#!/usr/bin/env bash
# GPU check of the in-process agent (issue #6). Needs: a GPU, nvcc, gcc,
# python3 with torch (optional), and .gpu/agent/agentcheck built on a Go
# machine:  CGO_ENABLED=0 go build -o .gpu/agent/agentcheck ./pkg/runtime/agent/gputest/agentcheck
#
# Checks: static and shared cudart vecadd under the agent (kernels listed,
# fatbin fetched, __constant__ aliased, hand-written instrumented PTX loaded
# and activated, counter == threads x launches, results unchanged; SIGKILL
# of the tool leaves the app correct), hold-at-module-load, PyTorch under the
# agent, and the empty-kernel launch rate with and without the agent.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
W=${OUT:-/tmp}/agent-check
mkdir -p "$W"
B=$W/build
mkdir -p "$B"
CHECK=$ROOT/.gpu/agent/agentcheck
PTX=$ROOT/pkg/runtime/agent/gputest/vectoradd_probe.ptx
SRC=$ROOT/pkg/runtime/agent/gputest
N=1048576
declare -a SUMMARY
pass() { SUMMARY+=("PASS $1"); echo "== PASS $1"; }
fail() { SUMMARY+=("FAIL $1"); echo "== FAIL $1"; }

echo "agent-check: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1); $(nvcc --version | grep -o 'release [0-9.]*')"
make -s -C pkg/runtime/agent AGENT_BIN_DIR="$B" CC=gcc || { echo "agent build failed"; exit 1; }
AGENT=$B/libgpubpf-agent.so
# AGENT_CHECK_EXTRA_PRELOAD: another library to preload with the agent (a
# crash reporter when diagnosing).
PRELOAD="$AGENT${AGENT_CHECK_EXTRA_PRELOAD:+ $AGENT_CHECK_EXTRA_PRELOAD}"
ARCH=${ARCH:-sm_90}
nvcc -O2 -arch=$ARCH -o "$B/vecadd_static" "$SRC/vecadd.cu" &&
nvcc -O2 -arch=$ARCH -cudart shared -o "$B/vecadd_shared" "$SRC/vecadd.cu" &&
nvcc -O2 -arch=$ARCH -default-stream per-thread -o "$B/vecadd_ptds" "$SRC/vecadd.cu" &&
nvcc -O2 -arch=$ARCH -o "$B/emptybench" "$SRC/emptybench.cu" &&
nvcc -O2 -o "$B/vecadd_drvapi" "$SRC/drvapi.c" -lcuda || { echo "nvcc failed"; exit 1; }
[ -x "$CHECK" ] || { echo "missing $CHECK (build it on a Go machine and carry .gpu/agent)"; exit 1; }

# run_vecadd VARIANT: probe, kill -9 the tool, re-attach, app stays correct
run_vecadd() {
	local v=$1 log=$W/vecadd_$1.log bin=$B/vecadd_$1 extra=
	[ "$v" = graph ] && bin=$B/vecadd_static extra=graph
	GPUBPF_AGENT_DEBUG=1 LD_PRELOAD="$PRELOAD" "$bin" $N 400 20 $extra >"$log" 2>&1 &
	local app=$!
	timeout 60 "$CHECK" -pid $app -mode probe -ptx "$PTX" -n $N -wait 1s 2>&1 | tee "$W/probe_$v.log"
	grep -q "PASS probe" "$W/probe_$v.log" && pass "$v: list/fetch/globals/JIT/activate/counter/memfd/BPF map" || fail "$v: probe"
	"$CHECK" -pid $app -mode kill -ptx "$PTX" -n $N >"$W/kill_$v.log" 2>&1 &
	local tool=$!
	for _ in $(seq 100); do grep -q ACTIVE "$W/kill_$v.log" && break; sleep 0.1; done
	sleep 0.5
	kill -9 $tool; wait $tool 2>/dev/null
	grep -q ACTIVE "$W/kill_$v.log" && pass "$v: tool SIGKILLed while active" || { cat "$W/kill_$v.log"; fail "$v: kill setup"; }
	sleep 0.5
	timeout 30 "$CHECK" -pid $app -mode list 2>&1 | tee "$W/list_$v.log" | grep -E "inventory|named|PASS|FAIL"
	grep -q "PASS list (0 active" "$W/list_$v.log" && pass "$v: re-attach after kill" || fail "$v: re-attach"
	wait $app
	local rc=$?
	tail -3 "$log"
	[ $rc = 0 ] && grep -q "RESULT PASS" "$log" && pass "$v: app results correct throughout" || fail "$v: app results (rc $rc)"
}
run_vecadd static
echo "(vecadd_shared links $(ldd "$B/vecadd_shared" | grep -o -m1 'libcudart[^ ]*' | head -1))"
run_vecadd shared
run_vecadd ptds
run_vecadd drvapi
run_vecadd graph

# hold: instrument at module load, so the very first launch is instrumented
GPUBPF_AGENT_HOLD=1 LD_PRELOAD="$PRELOAD" "$B/vecadd_static" $N 20 200 >"$W/hold_app.log" 2>&1 &
app=$!
timeout 60 "$CHECK" -pid $app -mode hold -ptx "$PTX" -n $N -launches 20 -settle 20ms 2>&1 | tee "$W/hold.log"
wait $app; rc=$?
[ $rc = 0 ] && grep -q "PASS probe" "$W/hold.log" && grep -q "instrumented launches 20 of 20" "$W/hold.log" &&
	pass "hold: all 20 launches instrumented from the first" || { tail -5 "$W/hold_app.log"; fail "hold"; }

# two GPUs: one clone per context, both routed
NGPU=$(nvidia-smi -L | wc -l)
if [ "$NGPU" -ge 2 ]; then
	GPUBPF_AGENT_DEBUG=1 LD_PRELOAD="$PRELOAD" "$B/vecadd_static" $N 200 20 multi >"$W/multi_app.log" 2>&1 &
	app=$!
	timeout 60 "$CHECK" -pid $app -mode probe -ptx "$PTX" -n $N -devices 2 -wait 1s 2>&1 | tee "$W/multi.log"
	wait $app; rc=$?
	tail -2 "$W/multi_app.log"
	[ $rc = 0 ] && grep -q "PASS probe" "$W/multi.log" && grep -q "RESULT PASS" "$W/multi_app.log" &&
		pass "two GPUs: instrumented on both, counters exact, results correct" || fail "two GPUs"
else
	echo "one GPU: the two-GPU check was not run"
fi

# PyTorch under the agent
if python3 -c 'import torch' 2>/dev/null; then
	cat >"$W/torch_app.py" <<'PY'
import time, torch
x = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
a = (x * 2 + 1).sum().item(); m = torch.randn(512, 512, device="cuda"); (m @ m).sum().item()
print("TORCH READY", flush=True)
time.sleep(6)
y = torch.softmax(torch.ones(64, 64, device="cuda"), dim=1).sum().item()
ok = a == float((1 << 20) ** 2) and abs(y - 64.0) < 1e-3
print("TORCH", "PASS" if ok else "FAIL", a, y, flush=True)
PY
	LD_PRELOAD="$PRELOAD" python3 "$W/torch_app.py" >"$W/torch_app.log" 2>&1 &
	app=$!
	for _ in $(seq 600); do grep -q "TORCH READY" "$W/torch_app.log" && break; sleep 0.1; done
	timeout 60 "$CHECK" -pid $app -mode list -kernel elementwise 2>&1 | tee "$W/torch_list.log" | grep -vE "^  kernel" | head -20
	grep -E "^  kernel" "$W/torch_list.log" | head -5
	wait $app; rc=$?
	cat "$W/torch_app.log" | tail -2
	[ $rc = 0 ] && grep -q "TORCH PASS" "$W/torch_app.log" && grep -q "PASS list" "$W/torch_list.log" &&
		pass "pytorch: kernels listed, script correct" || fail "pytorch"
else
	echo "no torch: PyTorch check not run"
fi

# empty-kernel launch rate, with and without the agent (alternating)
: >"$W/bench.txt"
for i in 1 2 3 4 5 6 7; do
	"$B/emptybench" 200000 | awk '{print "without", $2}' >>"$W/bench.txt"
	LD_PRELOAD=$AGENT "$B/emptybench" 200000 | awk '{print "with", $2}' >>"$W/bench.txt"
done
python3 - "$W/bench.txt" <<'PY'
import sys, statistics
r = {"with": [], "without": []}
for l in open(sys.argv[1]):
    k, v = l.split(); r[k].append(float(v))
w, wo = statistics.median(r["with"]), statistics.median(r["without"])
print(f"launch rate median: without agent {wo:.0f}/s, with agent {w:.0f}/s, ratio {w/wo*100:.2f}%")
print("  without:", " ".join(f"{x:.0f}" for x in r["without"]))
print("  with:   ", " ".join(f"{x:.0f}" for x in r["with"]))
PY

echo
printf '%s\n' "${SUMMARY[@]}"
! printf '%s\n' "${SUMMARY[@]}" | grep -q ^FAIL
