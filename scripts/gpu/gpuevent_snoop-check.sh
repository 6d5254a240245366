#!/usr/bin/env bash
# gpuevent_snoop on the GPU machine (run by scripts/gpu-check.sh, or alone):
#   - alloc_mix (static and -cudart shared cudart): the stream, and the leak
#     report compared with the leak the sample plants and prints;
#   - vec_add / vec_add_shared: launches with kernel names and arguments;
#   - a PyTorch script (scripts/gpu/torch_alloc.py): allocator, copies, launches;
#   - launch_heavy: launch rate untraced vs traced, same invocation (goal >= 0.8).
# Needs root, bin/gpuevent_snoop and samples/bin/ (make -C samples).
set -uo pipefail
cd "$(dirname "$0")/../.."
TOOL=${GPUEVENT_SNOOP:-bin/gpuevent_snoop}
S=samples/bin
OUTDIR=${GPUBPF_GPU_LOGS:-${OUT:-/tmp}/gpu-check}/gpuevent_snoop
mkdir -p "$OUTDIR"
fail=0
notes=()

if [ ! -x "$TOOL" ]; then echo "SUMMARY: FAIL no $TOOL (make gpu-bundle on a build machine)"; exit 1; fi
if [ "$(id -u)" != 0 ]; then SUDO=sudo; else SUDO=; fi
ts() { date -u +%H:%M:%S; }

# bounded SECS CMD...: run CMD (the caller redirects its output); if it has
# not ended after SECS, record what it and its children are doing (states,
# kernel stacks of every thread, the Go tool's goroutines via SIGQUIT) in
# $OUTDIR/hangs.txt, kill it and return 124.
HANGS=$OUTDIR/hangs.txt
: >"$HANGS"
bounded() {
	local secs=$1 p i c t
	shift
	"$@" &
	p=$!
	for ((i = 0; i < secs * 10; i++)); do
		kill -0 $p 2>/dev/null || { wait $p; return; }
		sleep 0.1
	done
	{
		echo "== HANG after ${secs}s: $*"
		ps -eo pid,ppid,stat,wchan:32,etimes,args --forest | grep -v -E 'ps -eo|grep' | grep -A8 -E "^ *$p "
		for c in $p $(pgrep -P $p); do
			for t in /proc/$c/task/*; do
				echo "-- $t ($(cat $t/comm 2>/dev/null)) $(cut -d' ' -f3 $t/stat 2>/dev/null)"
				cat $t/stack 2>/dev/null | head -12
			done
		done
	} >>"$HANGS" 2>&1
	local kids
	kids=$(pgrep -P $p)
	kill -QUIT $p 2>/dev/null # a Go program prints every goroutine's stack
	sleep 2
	kill -9 $p $kids 2>/dev/null
	wait $p
	return 124
}

# leakcheck NAME: run alloc_mix under the tool (JSON) and compare its leak
# report with the "LEAK planned: N allocations, B bytes" line it prints.
leakcheck() {
	local bin=$1 j=$OUTDIR/$(basename "$1").jsonl
	echo "== $(ts) $bin: live stream"
	# Output to a file first: a pipe into head would end the tool and the
	# traced program with SIGPIPE.
	bounded 90 $SUDO "$TOOL" -- "$bin" 4 >"$OUTDIR/$(basename "$bin").txt" 2>&1
	head -60 "$OUTDIR/$(basename "$bin").txt"
	echo "== $(ts) $bin: JSON, leak check"
	bounded 90 $SUDO "$TOOL" -j -- "$bin" 4 >"$j" 2>"$j.err"
	cat "$j.err"
	# The sample prints its leak and its call counts; the tool must agree.
	local verdict
	verdict=$(python3 - "$j" <<'PY'
import collections, json, re, sys
allocs = bytes_ = 0
calls = collections.Counter()
planned = counts = None
for line in open(sys.argv[1]):
    m = re.search(r"LEAK planned: (\d+) allocations, (\d+) bytes", line)
    if m:
        planned = (int(m.group(1)), int(m.group(2)))
    m = re.search(r"calls: (.*)", line)
    if m:
        counts = dict((k, int(v)) for k, v in (kv.split("=") for kv in m.group(1).split()))
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    if r["type"] == "leak":
        allocs += r["allocs"]; bytes_ += r["bytes"]
    elif r["type"] in ("malloc", "free", "memcpy", "memset", "launch"):
        calls[r["api"]] += 1
calls["launches"] = calls["cudaLaunchKernel"] + calls["cudaLaunchKernel_ptsz"] + calls["cudaLaunchKernelExC"]
bad = []
if planned != (allocs, bytes_):
    bad.append(f"leak planned {planned}, reported ({allocs}, {bytes_})")
for k, v in (counts or {}).items():
    if calls[k] != v:
        bad.append(f"{k}: program made {v}, tool reported {calls[k]}")
if counts is None:
    bad.append("no 'calls:' line from the sample")
print("ok" if not bad else "; ".join(bad), f"(leak {allocs} allocations {bytes_} bytes; calls {dict(calls)})")
PY
)
	echo "check: $verdict"
	case $verdict in
	ok*) notes+=("$(basename "$bin") ok") ;;
	*) fail=1; notes+=("$(basename "$bin") MISMATCH") ;;
	esac
}

for b in "$S/alloc_mix" "$S/alloc_mix_shared"; do
	[ -x "$b" ] && leakcheck "$b" || echo "skip: no $b"
done

for b in "$S/vec_add" "$S/vec_add_shared"; do
	[ -x "$b" ] || { echo "skip: no $b"; continue; }
	echo "== $(ts) $b: launches with 4 argument words, summary"
	bounded 90 $SUDO "$TOOL" -a 4 -- "$b" >"$OUTDIR/$(basename "$b").txt" 2>&1
	head -30 "$OUTDIR/$(basename "$b").txt"
	# Kernel names must be names, not addresses: what the binary has.
	echo "symbols of $b:"; nm "$b" | grep -i -E 'vectorAdd|cudaLaunchKernel' | head -8
	bounded 90 $SUDO "$TOOL" --summary -- "$b" >"$OUTDIR/$(basename "$b").summary" 2>&1
	tail -30 "$OUTDIR/$(basename "$b").summary"
done

if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
	echo "== $(ts) PyTorch: scripts/gpu/torch_alloc.py"
	$SUDO "$TOOL" -e malloc,free,memcpy -- python3 scripts/gpu/torch_alloc.py >"$OUTDIR/torch.txt" 2>&1
	head -20 "$OUTDIR/torch.txt"; echo "..."; tail -30 "$OUTDIR/torch.txt"
	$SUDO "$TOOL" --summary -- python3 scripts/gpu/torch_alloc.py >"$OUTDIR/torch.summary" 2>&1
	tail -60 "$OUTDIR/torch.summary"
	notes+=("torch ran")
else
	echo "skip: PyTorch with CUDA not importable"
fi

# Launch rate: empty kernels (KERNEL_NS=0) so the CPU-side launch path is
# what is measured. Untraced and each probe configuration alternate, three
# rounds; medians. Configurations:
#   default        runtime + driver APIs, entry and return probes
#   no-driver      runtime APIs only (--no-driver)
#   entry          launches from the entry probe alone (--launch-entry)
#   entry-nodrv    both: one probe hit per launch
if [ -x "$S/launch_heavy" ]; then
	N=${LAUNCHES:-200000}
	rate() { grep -o 'launches_per_s=[0-9.]*' | tail -1 | cut -d= -f2; }
	declare -A R
	# hit-only / no-ring: where the cost goes (GPUEVENT_SNOOP_COST: probes
	# that return at once; everything but the ring buffer), default probes.
	CONFIGS=(untraced default no-driver entry entry-nodrv hit-only no-ring)
	flags_of() {
		case $1 in
		default | hit-only | no-ring) echo "" ;; no-driver) echo "--no-driver" ;; entry) echo "--launch-entry" ;;
		entry-nodrv) echo "--launch-entry --no-driver" ;;
		esac
	}
	cost_of() { case $1 in hit-only) echo 1 ;; no-ring) echo 2 ;; *) echo 0 ;; esac; }
	for i in 1 2 3; do
		for c in "${CONFIGS[@]}"; do
			out=$OUTDIR/launch_heavy_$c.txt
			if [ "$c" = untraced ]; then
				bounded 90 "$S/launch_heavy" "$N" 4 0 64 >"$out" 2>&1 || echo "untraced run $i exited with $?"
			else
				# shellcheck disable=SC2046
				GPUEVENT_SNOOP_COST=$(cost_of "$c") bounded 90 $SUDO "$TOOL" $(flags_of "$c") -- "$S/launch_heavy" "$N" 4 0 64 >"$out" 2>"$out.err" || echo "$c run $i exited with $?"
			fi
			grep -q "RESULT launch_heavy ok" "$out" || { echo "$c run $i: no RESULT ok"; fail=1; }
			R[$c]="${R[$c]:-} $(rate <"$out")"
		done
	done
	med() { printf '%s\n' $1 | sort -g | sed -n 2p; }
	U=$(med "${R[untraced]}")
	echo "launch_heavy, $N empty-kernel launches on 4 streams, launches/s (3 runs each, alternating):"
	ratios=""
	for c in "${CONFIGS[@]}"; do
		m=$(med "${R[$c]}")
		r=$(python3 -c "print(f'{$m/$U:.3f}')" 2>/dev/null || echo "?")
		printf '  %-12s %-28s median %s  ratio %s\n' "$c" "${R[$c]}" "$m" "$r"
		case $c in untraced | hit-only | no-ring) ;; *) ratios+="$c=$r " ;; esac
	done
	tail -1 "$OUTDIR/launch_heavy_default.txt.err"
	for b in "$S/launch_heavy_shared"; do
		[ -x "$b" ] || continue
		us=$(bounded 90 "$b" "$N" 4 0 64 | rate)
		bounded 90 $SUDO "$TOOL" -- "$b" "$N" 4 0 64 >"$OUTDIR/launch_heavy_shared.txt" 2>"$OUTDIR/launch_heavy_shared.err" || echo "shared run exited with $?"
		ts_=$(rate <"$OUTDIR/launch_heavy_shared.txt")
		echo "launch_heavy_shared: untraced $us/s traced (default) $ts_/s"
	done
	echo "launch rate ratios (goal >= 0.8): $ratios"
	notes+=("launch ratio $ratios")
else
	echo "skip: no $S/launch_heavy"
fi

if [ -s "$HANGS" ]; then
	echo "runs that did not end:"; cat "$HANGS"
	fail=1; notes+=("$(grep -c '^== HANG' "$HANGS") hang(s)")
fi
if [ $fail -eq 0 ]; then echo "SUMMARY: PASS ${notes[*]}"; else echo "SUMMARY: FAIL ${notes[*]}"; fi
exit $fail
