#!/usr/bin/env bash
# Why did launchlate -p on a running PyTorch get no CUPTI kernel record
# (issue 43)? Each way of turning CUPTI on in a program that already runs
# CUDA, side by side (a diagnosis, not a check: it prints what each saw):
#   self-*      the program itself dlopens libcupti 1 s in (cupti_midrun.cu)
#   p-inject    launchlate -p on cupti_midrun started without the agent
#   p-preload   launchlate -p on cupti_midrun started with the agent preloaded
#   torch-prof  PyTorch's own profiler started after 100 steps
#   p-shared    p-inject with the CUDA runtime shared (PyTorch's way)
#   torch-p     launchlate -p on torch_train.py started without the agent
#   torch-api   torch-p with launches stamped from CUPTI's API records
#   torch-pre   launchlate -p on torch_train.py started with the agent preloaded
# WHICH (default all of them) picks some: WHICH="torch-p p-shared".
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
export PATH=$PWD/bin:$PATH
LOGS=${GPUBPF_GPU_LOGS:-${OUT:-/tmp}/gpu-check}/cupti-midrun
rm -rf "$LOGS"
mkdir -p "$LOGS"
AGENT=$PWD/bin/libgpubpf-agent.so
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
cuda=$(dirname "$(dirname "$(readlink -f "$nvcc")")")
inc=$cuda/include
[ -f "$inc/cupti.h" ] || inc=$cuda/extras/CUPTI/include
sm=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
WHICH=${WHICH:-"self p-inject p-preload p-shared torch-prof torch-p torch-api torch-pre"}
want() { [[ " $WHICH " == *" $1 "* ]]; }
bin=$LOGS/cupti_midrun
for rt in static shared; do
	if ! "$nvcc" -O2 -std=c++17 -gencode arch=compute_$sm,code=sm_$sm -cudart $rt -I"$inc" -o "$bin-$rt" \
		scripts/gpu/cupti/cupti_midrun.cu -ldl >>"$LOGS/build.txt" 2>&1; then
		cat "$LOGS/build.txt"
		exit 1
	fi
done
ln -sf "$bin-static" "$bin"
tk=$(ls "$cuda"/lib64/libcupti.so.* "$cuda"/targets/*/lib/libcupti.so.* 2>/dev/null | head -1)
wheel=$(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13/lib/libcupti.so.13"))' 2>/dev/null)

echo "cupti-midrun: $(date -u +%Y-%m-%dT%H:%M:%SZ), toolkit CUPTI $tk, wheel CUPTI $wheel"
for l in "$tk" "$wheel"; do
	[ -f "$l" ] && want self || continue
	echo "self ($l): $(timeout 30 "$bin" self 4 "$l" 2>&1 | tail -1)"
done

# attach NAME SECS PRELOAD(0|1) CMD...: start CMD, wait for its ready line,
# attach launchlate -p for SECS seconds, print the tool's and the app's lines
attach() {
	local name=$1 secs=$2 pre=$3
	shift 3
	want "$name" || return 0
	local env=(GPUBPF_AGENT_DEBUG=1 ${JOIN:+GPUBPF_CUPTI_JOIN=$JOIN})
	[ "$pre" = 1 ] && env+=(LD_PRELOAD="$AGENT")
	env "${env[@]}" timeout 90 "$@" >"$LOGS/$name-app.out" 2>&1 &
	local app=$!
	local pid=""
	for _ in $(seq 900); do
		pid=$(grep -aoE '(MIDRUN_READY|GATED) pid=[0-9]+' "$LOGS/$name-app.out" 2>/dev/null | head -1 | cut -d= -f2)
		[ -n "$pid" ] && break
		sleep 0.1
	done
	[ -n "${GATE:-}" ] && (sleep 2; touch "$GATE") &
	# which libcupti the program maps before the attach
	grep -ao '/[^ ]*libcupti[^ ]*' "/proc/${pid:-0}/maps" 2>/dev/null | sort -u | sed "s/^/  $name maps before: /"
	# TEXT=1: the table a user sees, printed here (the README's view)
	local fmt=(-v -j)
	[ "${TEXT:-0}" = 1 ] && fmt=()
	timeout --kill-after=5 $((secs + 60)) launchlate "${fmt[@]}" -d "$secs" -p "${pid:-0}" >"$LOGS/$name.out" 2>"$LOGS/$name.err"
	if [ "${TEXT:-0}" = 1 ]; then
		echo "\$ sudo launchlate -d $secs -p $pid"
		cat "$LOGS/$name.out"
		grep -av skipping "$LOGS/$name.err" | tail -4
	fi
	echo "$name: tool rc $?: $(grep -ao '[0-9]* kernel starts timed through CUPTI' "$LOGS/$name.err" | head -1)"
	grep -ao 'CUPTI, on in [^"]*' "$LOGS/$name.out" "$LOGS/$name.err" | head -1 | sed 's/^/  /'
	grep -ao 'CUPTI gave no kernel records[^,]*' "$LOGS/$name.err" | head -1 | sed 's/^/  /'
	wait $app
	echo "  app rc $?: $(grep -aE '^(MIDRUN|RESULT)' "$LOGS/$name-app.out" | tail -1)"
	grep -a 'kernel times' "$LOGS/$name-app.out" | head -8 | sed 's/^/  agent: /'
}
GATE="" attach p-inject 4 0 "$bin" plain 10
GATE="" attach p-preload 4 1 "$bin" plain 10
GATE="" attach p-shared 4 0 "$bin-shared" plain 10

# PyTorch's profiler (Kineto) turned on mid-run: the in-process reference
cat >"$LOGS/prof.py" <<'PY'
import torch, time
m = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).cuda()
x = torch.randn(256, 1024, device="cuda")
for _ in range(100):
    m(x).sum().backward()
torch.cuda.synchronize()
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as p:
    for _ in range(20):
        m(x).sum().backward()
    torch.cuda.synchronize()
ev = [e for e in p.events() if e.device_type == torch.autograd.DeviceType.CUDA]
print(f"PROF kernels={len(ev)} names={len(set(e.name for e in ev))}")
PY
want torch-prof && echo "torch-prof: $(timeout 120 python3 "$LOGS/prof.py" 2>&1 | grep -a PROF | tail -1)"

GATE=$LOGS/torch-p.gate attach torch-p 6 0 python3 scripts/gpu/torch_train.py --seconds 10 --gate "$LOGS/torch-p.gate"
JOIN=api GATE=$LOGS/torch-api.gate attach torch-api 6 0 python3 scripts/gpu/torch_train.py --seconds 10 --gate "$LOGS/torch-api.gate"
GATE=$LOGS/torch-pre.gate attach torch-pre 6 1 python3 scripts/gpu/torch_train.py --seconds 10 --gate "$LOGS/torch-pre.gate"
echo "SUMMARY: cupti-midrun done"
