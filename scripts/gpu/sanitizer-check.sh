#!/usr/bin/env bash
# GPU checks of the sanitizer path (issue 58, docs/sanitizer.md): kernels
# without PTX traced inside through NVIDIA's Compute Sanitizer.
#   0  the agent's hand-written sanitizer declarations match the toolkit's headers
#   1  threadhist on samples/sass_only (SASS only): runs = threads x launches,
#      for every --by, the program's results unchanged
#   2  kernelretsnoop and kernel_trace on sass_only: every exit, every thread once
#   3  PyTorch (cuBLAS, ATen: no PTX): threadhist's runs = the threads the
#      agent saw launched patched, per kernel against an injected CUPTI
#      tracer's launches x grid x block of the same steps, the loss unchanged
#   4  -p on a program started without GPUBPF_SANITIZER: said, with the restart;
#      with it (agent preloaded, GPUBPF_SANITIZER=on): exact from the attach
# Prints "ok"/"FAIL" lines and "SUMMARY: N/M sanitizer checks pass".
set -uo pipefail
cd "$(dirname "$0")/../.."
LOGS=${GPUBPF_GPU_LOGS:-${OUT:-/tmp}/gpu-check}/sanitizer
rm -rf "$LOGS"; mkdir -p "$LOGS"
pass=0 fail=0
ok() { echo "ok   $*"; pass=$((pass + 1)); }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }
run() {
	local name=$1; shift
	timeout --kill-after=5 180 "$@" >"$LOGS/$name.out" 2>"$LOGS/$name.err"
	echo $? >"$LOGS/$name.rc"
}
result_ok() { grep -aq "RESULT $2[a-z_]* ok" "$LOGS/$1.out"; }
. scripts/gpu/lib.sh # jsum, kus, med
# patched FILE: "LAUNCHES THREADS" of the -j output's sanitizer line.
patched() { python3 - "$1" <<'PY'
import json, sys
for line in open(sys.argv[1], errors="replace"):
    try: o = json.loads(line)
    except ValueError: continue
    if isinstance(o, dict) and o.get("type") == "sanitizer": print(o["launches"], o["threads"])
PY
}
C=${CUDA_HOME:-/usr/local/cuda}
if [ ! -e "$C/compute-sanitizer/libsanitizer-public.so" ]; then
	echo "SUMMARY: 0/0 sanitizer checks pass (no $C/compute-sanitizer/libsanitizer-public.so: skipped)"
	exit 0
fi

# 0 ----------------------------------------------------------------------------
if gcc -I"$C/include" -I"$C/compute-sanitizer/include" -o "$LOGS/sandefs_check" scripts/gpu/sanitizer/sandefs_check.c >"$LOGS/sandefs.err" 2>&1; then
	ok "sandefs.h matches the toolkit's sanitizer headers ($(grep -ao 'release [0-9.]*' <<<"$(nvcc --version)"))"
else
	bad "sandefs.h differs from the toolkit's headers: $(head -3 "$LOGS/sandefs.err")"
fi

# 1 ----------------------------------------------------------------------------
N=1000000 L=20
WANT=$((L * ((N + 255) / 256) * 256))
for by in thread.x global block warp; do
	n=th-$by
	run $n bin/threadhist -j --by $by -- samples/bin/sass_only $N $L
	got=$(jsum "$LOGS/$n.out" kernel runs)
	pt=$(patched "$LOGS/$n.out")
	if result_ok $n sass_only && [ "$got" = "$WANT" ] && [ "${pt#* }" = "$WANT" ]; then
		ok "threadhist --by $by sass_only (SASS only): $got runs = $WANT threads x launches; patched: $pt"
	else
		bad "threadhist --by $by sass_only: runs $got want $WANT, patched '$pt' (rc $(cat $LOGS/$n.rc)) $(tail -2 "$LOGS/$n.err" | tr '\n' ' ')"
	fi
done
run th-text bin/threadhist -- samples/bin/sass_only $N $L
grep -q 'imbalance:' "$LOGS/th-text.out" && grep -q 'through the Compute Sanitizer' "$LOGS/th-text.err" && ok "threadhist text view on sass_only" || bad "threadhist text view: $(tail -2 "$LOGS/th-text.err" | tr '\n' ' ')"

# 2 ----------------------------------------------------------------------------
run kr bin/kernelretsnoop -j -- samples/bin/sass_only 4096 3
exits=$(jsum "$LOGS/kr.out" kernel exits)
result_ok kr sass_only && [ "$exits" = $((3 * 4096)) ] && ok "kernelretsnoop sass_only: $exits exits" || bad "kernelretsnoop sass_only: $exits exits, want $((3 * 4096)) $(tail -2 "$LOGS/kr.err" | tr '\n' ' ')"
run kt bin/kernel_trace -j --max-events -1 -- samples/bin/sass_only 64 2
dup=$(python3 - "$LOGS/kt.out" <<'PY'
import json, sys, collections
c = collections.Counter()
for line in open(sys.argv[1], errors="replace"):
    try: o = json.loads(line)
    except ValueError: continue
    if o.get("type") == "thread": c[(o["grid"], tuple(o["block"]), tuple(o["thread"]))] += 1
print(len(c), len({k[0] for k in c}), sum(1 for v in c.values() if v != 1))
PY
)
set -- $dup
result_ok kt sass_only && [ "$1" = 512 ] && [ "$2" = 2 ] && [ "$3" = 0 ] && ok "kernel_trace sass_only: $1 threads in $2 launches, each once" || bad "kernel_trace sass_only: threads/launches/dups = $dup (want 512 2 0) $(tail -2 "$LOGS/kt.err" | tr '\n' ' ')"

# 3 ----------------------------------------------------------------------------
if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null && bash scripts/gpu/cupti/build.sh >"$LOGS/cupti-build.log" 2>&1; then
	STEPS=30
	run torch bin/threadhist -j --by block -- python3 scripts/gpu/torch_train.py --steps $STEPS
	run torch-ref env CUDA_INJECTION64_PATH="$PWD/scripts/gpu/cupti/libcupti_trace.so" CUPTI_TRACE_OUT="$LOGS/torch-ref.cupti" python3 scripts/gpu/torch_train.py --steps $STEPS
	got=$(jsum "$LOGS/torch.out" kernel runs)
	pt=$(patched "$LOGS/torch.out")
	l1=$(grep -ao 'loss=[0-9.e+-]*' "$LOGS/torch.out" | tail -1) l0=$(grep -ao 'loss=[0-9.e+-]*' "$LOGS/torch-ref.out" | tail -1)
	cmp=$(python3 - "$LOGS/torch.out" "$LOGS/torch-ref.cupti" <<'PY'
import collections, json, sys
th = collections.Counter()
for line in open(sys.argv[1], errors="replace"):
    if line.startswith('{"type":"kernel"'):
        o = json.loads(line)
        th[o["mangled"]] += o["runs"]
ref = collections.Counter()
for line in open(sys.argv[2], errors="replace"):
    if line.startswith("grid="):
        f = dict(kv.split("=", 1) for kv in line.split(" name=", 1)[0].split())
        ref[line.rstrip("\n").split(" name=", 1)[1]] += int(f["threads"])
diff = {k: (th[k], ref[k]) for k in set(th) | set(ref) if th[k] != ref[k]}
print(("ok" if ref and not diff else "bad") + f" {len(ref)} kernels, {sum(ref.values())} threads by CUPTI's records; threadhist {sum(th.values())}; differing kernels {len(diff)}: {list(diff.items())[:3]}")
PY
)
	if result_ok torch torch_train && [ -n "$pt" ] && [ "$got" = "${pt#* }" ] && [[ "$cmp" == ok* ]] && [ "$l1" = "$l0" ]; then
		ok "PyTorch: threadhist runs = threads of ${pt% *} patched launches = CUPTI's grid x block, per kernel: ${cmp#ok }; $l1 as untraced"
	else
		bad "PyTorch: runs $got, patched '$pt', $cmp, $l1 vs $l0 (rc $(cat $LOGS/torch.rc)) $(tail -3 "$LOGS/torch.err" | tr '\n' ' ')"
	fi
else
	echo "skip PyTorch (no torch with CUDA, or no CUPTI tracer: $(tail -1 "$LOGS/cupti-build.log" 2>/dev/null))"
fi

# 4 ----------------------------------------------------------------------------
AGENT=$PWD/bin/libgpubpf-agent.so
if [ -f "$AGENT" ] && python3 -c 'import torch' 2>/dev/null; then
	LD_PRELOAD=$AGENT python3 scripts/gpu/torch_train.py --seconds 30 >"$LOGS/p-app.out" 2>&1 &
	app=$!
	sleep 8
	run p bin/threadhist -d 10 -p $app
	wait $app 2>/dev/null
	grep -q 'GPUBPF_SANITIZER=on' "$LOGS/p.err" && ok "-p without GPUBPF_SANITIZER: said: $(grep -ao 'the sanitizer path: [^)]*' "$LOGS/p.err" | head -1 | cut -c1-200)" || bad "-p without GPUBPF_SANITIZER: not said (rc $(cat $LOGS/p.rc)): $(tail -3 "$LOGS/p.err" | tr '\n' ' ') app: $(tail -2 "$LOGS/p-app.out" | tr '\n' ' ')"
	# started with the agent and GPUBPF_SANITIZER=on, as an operator would:
	# -p then traces the SASS-only kernels from the attach on, runs = the
	# threads the agent saw launched patched (the end waits for them)
	LD_PRELOAD=$AGENT GPUBPF_SANITIZER=on python3 scripts/gpu/torch_train.py --seconds 40 >"$LOGS/p2-app.out" 2>&1 &
	app=$!
	sleep 8
	run p2 bin/threadhist -j --by block -d 15 -p $app
	wait $app 2>/dev/null
	got=$(jsum "$LOGS/p2.out" kernel runs)
	pt=$(patched "$LOGS/p2.out")
	if result_ok p2-app torch_train && [ -n "$pt" ] && [ "${pt#* }" -gt 0 ] && [ "$got" = "${pt#* }" ]; then
		ok "-p on PyTorch started with GPUBPF_SANITIZER=on: $got runs = threads of ${pt% *} launches patched after the attach; the loop ran on"
	else
		bad "-p with GPUBPF_SANITIZER=on: runs $got, patched '$pt' (rc $(cat $LOGS/p2.rc)) $(tail -3 "$LOGS/p2.err" | tr '\n' ' ') app: $(tail -1 "$LOGS/p2-app.out")"
	fi
fi
# 5 cost -----------------------------------------------------------------------
# vec_add's kernel time (CUDA events) untraced, through the PTX path
# (vec_add) and the sanitizer path (vec_add_sass, the same kernel without
# PTX), and a PyTorch training step: ratios to untraced, medians of 3
# alternating rounds. Reported, never asserted (docs/sanitizer.md).
for preset in "medium:10000 1000 256 40" "xlarge:1000000 1000 512 1954"; do
	name=${preset%%:*} args=${preset#*:}
	b=() p=() q=() bs=()
	for r in 1 2 3; do
		run c-b samples/bin/vec_add $args; b+=("$(kus "$LOGS/c-b.out")")
		run c-bs samples/bin/vec_add_sass $args; bs+=("$(kus "$LOGS/c-bs.out")")
		run c-p bin/threadhist -- samples/bin/vec_add $args; p+=("$(kus "$LOGS/c-p.out")")
		run c-s bin/threadhist -- samples/bin/vec_add_sass $args; q+=("$(kus "$LOGS/c-s.out")")
	done
	mb=$(med "${b[@]}") mbs=$(med "${bs[@]}") mp=$(med "${p[@]}") mq=$(med "${q[@]}")
	echo "cost: vec_add $name untraced ${mb}us (SASS-only build ${mbs}us); threadhist PTX path ${mp}us x$(python3 -c "print(f'{$mp/$mb:.2f}')"); sanitizer path ${mq}us x$(python3 -c "print(f'{$mq/$mbs:.2f}')")"
done
if python3 -c 'import torch' 2>/dev/null; then
	b=() s=()
	for r in 1 2 3; do
		run c-tb python3 scripts/gpu/torch_train.py --steps 300; b+=("$(grep -ao 'step_ms_median=[0-9.]*' "$LOGS/c-tb.out" | cut -d= -f2)")
		run c-ts bin/threadhist -- python3 scripts/gpu/torch_train.py --steps 300; s+=("$(grep -ao 'step_ms_median=[0-9.]*' "$LOGS/c-ts.out" | cut -d= -f2)")
	done
	mb=$(med "${b[@]}") ms=$(med "${s[@]}")
	declare -A KC=()
	for r in 1 2 3; do
		run c-kb python3 scripts/gpu/kernel_classes.py 100
		run c-ks bin/threadhist -- python3 scripts/gpu/kernel_classes.py 100
		while read -r n u; do KC[$n.b]+=" $u"; done < <(grep -ao 'CLASS name=[a-z_0-9]* us=[0-9.]*' "$LOGS/c-kb.out" | sed -E 's/CLASS name=(.*) us=(.*)/\1 \2/')
		while read -r n u; do KC[$n.s]+=" $u"; done < <(grep -ao 'CLASS name=[a-z_0-9]* us=[0-9.]*' "$LOGS/c-ks.out" | sed -E 's/CLASS name=(.*) us=(.*)/\1 \2/')
	done
	for n in gemm_4096 elementwise_16M reduction_16M; do
		kb=$(med ${KC[$n.b]:-}) ks=$(med ${KC[$n.s]:-})
		echo "cost: kernel class $n untraced ${kb}us, threadhist through the sanitizer ${ks}us x$(python3 -c "print(f'{$ks/$kb:.2f}')" 2>/dev/null)"
	done
	echo "cost: PyTorch training step untraced ${mb}ms, threadhist (every kernel through the sanitizer) ${ms}ms x$(python3 -c "print(f'{$ms/$mb:.2f}')") (rounds: ${b[*]} / ${s[*]})"
fi
echo "SUMMARY: $pass/$((pass + fail)) sanitizer checks pass"
[ $fail = 0 ]
