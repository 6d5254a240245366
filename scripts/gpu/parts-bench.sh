#!/usr/bin/env bash
# What each part of a tool's probe costs the kernel: vec_add under each
# variant command, interleaved with untraced runs, CUDA-event kernel time as
# a ratio to the untraced median of the same preset (median [min-max] over
# REPS). A diagnostic for choosing designs (docs/gpu-results.md); asserts
# only that every run leaves the app's RESULT line "ok".
#   VARIANTS="name=command prefix;..."  each run as: PREFIX -- samples/bin/vec_add PRESET
#   PRESETS="name:ELEMENTS ITERATIONS THREADS BLOCKS;..."  REPS (default 3)
#   APP=launch_heavy: runs samples/bin/launch_heavy PRESET instead ("name:
#   LAUNCHES STREAMS KERNEL_NS THREADS") and compares launches/s (the ratio
#   above 1 is then the faster); no CUPTI
#   CUPTI=1: every run (untraced ones too) also under the CUPTI activity
#   tracer (scripts/gpu/cupti): each line then adds the kernels' own GPU
#   duration (median of a run's timed launches, CUPTI end - start) as a
#   ratio, and the event time less that duration in us: what the launch
#   path (the CPU between the two event records) adds, apart from what the
#   probe adds on the GPU.
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/gpu/lib.sh # kus, gus
export PATH=$PWD/bin:$PATH
REPS=${REPS:-3}
LIMIT=${LIMIT:-120}
APP=${APP:-vec_add}
metric() { if [ "$APP" = launch_heavy ]; then lrate "$1"; else kus "$1"; fi; }
unit=us
[ "$APP" = launch_heavy ] && unit=/s
PRESETS=${PRESETS:-"medium:10000 1000 256 40;large:100000 1000 512 196;xlarge:1000000 1000 512 1954"}
VARIANTS=${VARIANTS:?VARIANTS=\"name=command prefix;...\"}
LOGS=${GPUBPF_GPU_LOGS:-${OUT:-/tmp}/gpu-check}
mkdir -p "$LOGS"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
IFS=';' read -ra PS <<<"$PRESETS"
IFS=';' read -ra VS <<<"$VARIANTS"
fail=0
inject=()
if [ "${CUPTI:-0}" = 1 ]; then
	scripts/gpu/cupti/build.sh >"$LOGS/parts-cupti-build.txt" 2>&1 || { echo "SUMMARY: parts-bench FAIL (CUPTI tracer build: $(tail -1 "$LOGS/parts-cupti-build.txt"))"; exit 1; }
	inject=(env CUDA_INJECTION64_PATH="$PWD/scripts/gpu/cupti/libcupti_trace.so")
fi
echo "parts-bench: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1), $(date -u +%FT%TZ), REPS=$REPS"
for ps in "${PS[@]}"; do
	name=${ps%%:*} P=${ps#*:} iters=$(echo $P | cut -d' ' -f2)
	declare -A K=() G=()
	for rep in $(seq "$REPS"); do
		rm -f "$T"/*.cupti
		timeout "$LIMIT" "${inject[@]}" ${inject:+CUPTI_TRACE_OUT="$T/base.cupti"} samples/bin/$APP $P >"$T/base" 2>&1
		K[base]+="$(metric "$T/base") "
		[ ${#inject[@]} -gt 0 ] && G[base]+="$(gus "$T/base.cupti" "$iters") "
		n=${#VS[@]}
		for i in $(seq 0 $((n - 1))); do
			v=${VS[$(((i + rep) % n))]} # rotate the order per repetition
			vn=${v%%=*} cmd=${v#*=}
			timeout "$LIMIT" "${inject[@]}" ${inject:+CUPTI_TRACE_OUT="$T/$vn.cupti"} $cmd -- samples/bin/$APP $P >"$T/$vn" 2>"$T/$vn.err"
			if ! grep -aq "RESULT $APP ok" "$T/$vn"; then
				echo "FAIL $name $vn rep $rep:"; tail -n 4 "$T/$vn" "$T/$vn.err" | cut -c1-300
				fail=1
			fi
			cp "$T/$vn.err" "$LOGS/parts-$name-$vn-$rep.err" 2>/dev/null
			K[$vn]+="$(metric "$T/$vn") "
			[ ${#inject[@]} -gt 0 ] && G[$vn]+="$(gus "$T/$vn.cupti" "$iters") "
		done
	done
	args=()
	for v in "${VS[@]}"; do args+=("${v%%=*}=${K[${v%%=*}]}=${G[${v%%=*}]:-}"); done
	python3 - "$unit" "$name" "$P" "${K[base]}" "${G[base]:-}" "${args[@]}" <<'PYEOF'
import statistics, sys
unit, name, preset = sys.argv[1], sys.argv[2], sys.argv[3]
base = [float(x) for x in sys.argv[4].split()]
gbase = [float(x) for x in sys.argv[5].split()]
b = statistics.median(base)
line = f"{name} ({preset}): base {b:.2f} {unit} [{min(base):.2f}-{max(base):.2f}]"
if gbase:
    gb = statistics.median(gbase)
    line += f", GPU {gb:.3f} us, event - GPU {b - gb:.2f} us"
print(line)
for arg in sys.argv[6:]:  # NAME=EVENT TIMES=GPU TIMES
    vn, times, gtimes = arg.split("=", 2)
    v = sorted(float(x) for x in times.split())
    if not v:
        print(f"  {vn:14s} n/a"); continue
    r = [x / b for x in v]
    line = f"  {vn:14s} {statistics.median(v):7.2f} {unit}  x{statistics.median(r):.3f} [{r[0]:.3f}-{r[-1]:.3f}]"
    g = sorted(float(x) for x in gtimes.split())
    if gbase and g:
        gm = statistics.median(g)
        line += f"  GPU {gm:.3f} us x{gm / gb:.3f}, event - GPU {statistics.median(v) - gm:.2f} us"
    print(line)
PYEOF
	unset K G
done
[ $fail = 0 ] && echo "SUMMARY: parts-bench ok" || echo "SUMMARY: parts-bench FAIL (a run lost its RESULT line)"
exit $fail
