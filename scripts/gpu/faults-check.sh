#!/usr/bin/env bash
# GPU fault checks (issue 13): whatever goes wrong, the traced application
# is never harmed, and a tool either says clearly what went wrong or
# recovers. Every case checks
#   (a) the application's stdout against an untraced run of the same sample
#       (timings masked by scripts/gpu/faults_util.py; line for line when the
#       app writes alone, in order among the tool's lines under -- CMD), and
#       its exit status 0;
#   (b) the tool's clear error (a specific substring) or its recovery (exact
#       counts after the fault).
# Groups (all by default; `faults-check.sh 4 9` runs groups 4 and 9):
#   1  kill -9 of a -p tool during attach and while attached; a tool attached
#      afterwards counts a round exactly
#   2  the app exits, forks (a child execs and launches), execs, and launches
#      from 8 host threads while a tool is attached
#   3  two tools on one process (two kernels) and on one kernel
#   4  the driver refuses the instrumented copy: at launch (registers,
#      samples/jit_limits regHeavy) and at JIT (parameter space, bigParam)
#   5  ring overflow: gpubpf run --ring-mb 1, one record per thread
#   6  a SASS-only kernel (samples/sass_only): skipped, with the reason
#   7  modules that are not fatbins (samples/modload): PTX text, raw cubin
#   8  corrupt BPF objects given to gpubpf run (-- CMD and -p)
#   9  garbage, truncated and oversized messages on the agent socket
#      (scripts/gpu/agent_fuzz.py); the agent serves a normal tool afterwards
#   10 connections from another uid (65534): refused and logged; the tool
#      run as that uid fails clearly
# Apps under -p run with the agent preloaded and are driven through gate
# files (samples/gated.cu, samples/fork_exec.cu), so that every count is
# exact. Every run is bounded by timeout. Logs in $GPUBPF_GPU_LOGS/faults.
# Prints "CASE name: PASS|FAIL|SKIP why" per case, last
#   SUMMARY: N/M fault cases pass, K skipped
# and exits non-zero on any FAIL. `faults-check.sh --selftest` checks this
# script's process handling on any machine (internal/gpuscripts runs it).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
ROOT=$PWD
# FAULTS_BIN, FAULTS_SAMPLES: other tool and sample directories (a dry run
# of this script with stand-ins).
BIN=${FAULTS_BIN:-$ROOT/bin}
export PATH=$BIN:$PATH
AGENT=$BIN/libgpubpf-agent.so
S=${FAULTS_SAMPLES:-$ROOT/samples/bin}
UTIL=$ROOT/scripts/gpu/faults_util.py
FUZZ=$ROOT/scripts/gpu/agent_fuzz.py
L=${GPUBPF_GPU_LOGS:-${OUT:-/tmp}/gpu-check}/faults
APP_LIMIT=${FAULTS_APP_LIMIT:-180}   # seconds any app may run
TOOL_LIMIT=${FAULTS_TOOL_LIMIT:-120} # seconds any tool run may take
T=256 B=4 TB=1024                    # GPU threads per block, blocks, threads per launch

pass=0 fail=0 skip=0
declare -A TO PID RC REFRC
STARTED=() # names given to spawn

# ---- process handling -------------------------------------------------------

# kill9 NAME: SIGKILL to the program spawn started as NAME (never to a
# process group: an empty pid kills nothing).
kill9() {
	[ -n "${PID[$1]:-}" ] && kill -KILL "${PID[$1]}" 2>/dev/null
	return 0
}

# cleanup: what this script started and has not reaped yet, by id (an
# unreaped timeout keeps its pid, and its program ends with it).
cleanup() {
	local n
	for n in "${STARTED[@]}"; do
		[ -n "${RC[$n]:-}" ] && continue
		kill9 "$n"
		kill -KILL "${TO[$n]}" 2>/dev/null
		reap "$n"
	done
	STARTED=()
}
trap cleanup EXIT

# child_of PID: the pid of PID's child (timeout's command), waiting for it.
child_of() {
	local p=$1 c i
	for i in $(seq 300); do
		c=$(awk '{print $1}' "/proc/$p/task/$p/children" 2>/dev/null)
		[ -z "$c" ] && command -v pgrep >/dev/null && c=$(pgrep -P "$p" | head -1)
		if [ -n "$c" ]; then
			echo "$c"
			return 0
		fi
		kill -0 "$p" 2>/dev/null || return 1
		[ "$i" -gt 1 ] && sleep 0.01
	done
	return 1
}

# spawn NAME LIMIT CMD...: CMD in the background under timeout, stdout and
# stderr in $L/NAME.out and .err; TO[NAME] is the timeout, PID[NAME] CMD.
spawn() {
	local name=$1 limit=$2
	shift 2
	timeout -k 5 "$limit" "$@" >"$L/$name.out" 2>"$L/$name.err" &
	TO[$name]=$!
	RC[$name]=""
	STARTED+=("$name")
	PID[$name]=$(child_of "${TO[$name]}") || PID[$name]=""
	[ -n "${PID[$name]}" ]
}

# reap NAME: wait for it (once); its exit status in RC[NAME] (124: timed out).
reap() {
	if [ -z "${RC[$1]:-}" ]; then
		wait "${TO[$1]}"
		RC[$1]=$?
	fi
	return 0
}

running() { kill -0 "${TO[$1]}" 2>/dev/null; }

# ends_within NAME SECS: did it end by itself within SECS? (reaped if so)
ends_within() {
	local i n
	n=$(awk -v s="$2" 'BEGIN { printf "%d", s * 20 }')
	for ((i = 0; i < n; i++)); do
		running "$1" || {
			reap "$1"
			return 0
		}
		sleep 0.05
	done
	running "$1" && return 1
	reap "$1"
}

# stop NAME: Ctrl-C (SIGINT) to it, as a user ends a tool; SIGKILL if it
# has not ended 30 s later. Returns 1 when it had to be killed.
stop() {
	[ -n "${TO[$1]:-}" ] || return 1
	running "$1" || {
		reap "$1"
		return 0
	}
	if [ -n "${PID[$1]:-}" ]; then
		kill -INT "${PID[$1]}" 2>/dev/null
		ends_within "$1" 30 && return 0
		kill9 "$1"
	else
		kill -KILL "${TO[$1]}" 2>/dev/null
	fi
	reap "$1"
	return 1
}

# run NAME LIMIT CMD...: CMD in the foreground under timeout; RC[NAME].
run() {
	local name=$1 limit=$2
	shift 2
	timeout -k 5 "$limit" "$@" >"$L/$name.out" 2>"$L/$name.err"
	RC[$name]=$?
}

wait_file() { # PATH SECS
	local i n
	n=$(awk -v s="$2" 'BEGIN { printf "%d", s * 20 }')
	for ((i = 0; i < n; i++)); do
		[ -e "$1" ] && return 0
		sleep 0.05
	done
	[ -e "$1" ]
}

# wait_attached NAME SECS: the tool (run with -v) says it instrumented a kernel.
wait_attached() {
	local i n
	n=$(awk -v s="$2" 'BEGIN { printf "%d", s * 20 }')
	for ((i = 0; i < n; i++)); do
		grep -q 'instrumented (' "$L/$1.err" 2>/dev/null && return 0
		running "$1" || return 1
		sleep 0.05
	done
	return 1
}

# ---- results ----------------------------------------------------------------

verdict() { # NAME PASS|FAIL|SKIP WHY
	echo "CASE $1: $2${3:+ $3}"
	case $2 in
	PASS) pass=$((pass + 1)) ;;
	FAIL) fail=$((fail + 1)) ;;
	*) skip=$((skip + 1)) ;;
	esac
}

fail_all() { # "NAMES" WHY
	local n
	for n in $1; do verdict "$n" FAIL "$2"; done
}

last_line() { # FILE: its last non-empty line, shortened
	grep -v '^[[:space:]]*$' "$1" 2>/dev/null | tail -1 | cut -c1-240
}

# ref NAME CMD...: the untraced reference run (no agent).
ref() {
	local name=$1
	shift
	timeout -k 5 "$APP_LIMIT" "$@" >"$L/$name.ref" 2>"$L/$name.ref.err"
	REFRC[$name]=$?
	[ "${REFRC[$name]}" = 0 ] && grep -q '^RESULT [a-z_]* ok' "$L/$name.ref"
}

# app_check REF OUTFILE RC [--sub]: APPWHY is empty when the app was
# unharmed: exit status 0 and the same output as its untraced run.
APPWHY=""
app_check() {
	local ref=$1 out=$2 rc=$3 why
	shift 3
	APPWHY=""
	if [ "${REFRC[$ref]:-x}" != 0 ]; then
		APPWHY="the untraced run itself failed (rc ${REFRC[$ref]:-none}: $(last_line "$L/$ref.ref"))"
		return 1
	fi
	[ "$rc" = 0 ] || APPWHY="exit status $rc (untraced: 0)"
	[ "$rc" = 124 ] && APPWHY="timed out"
	if ! why=$(python3 "$UTIL" same "$L/$ref.ref" "$out" "$@"); then
		APPWHY="${APPWHY:+$APPWHY; }output differs from the untraced run: $why"
	fi
	[ -z "$APPWHY" ]
}

runs_of() { # NAME: threadhist's "N thread runs counted"
	grep -ao 'threadhist: [0-9]* thread runs counted' "$L/$1.err" | tail -1 | awk '{print $2}'
}
entries_of() { # NAME: kernel_trace's "N thread entries received"
	grep -ao 'kernel_trace: [0-9]* thread entries received' "$L/$1.err" | tail -1 | awk '{print $2}'
}

# need SAMPLE...: are the samples built? (NEEDWHY says which is not)
NEEDWHY=""
need() {
	local s
	for s in "$@"; do
		if [ ! -x "$S/$s" ]; then
			NEEDWHY="missing $S/$s (make -C samples)"
			return 1
		fi
	done
}

# start_gated NAME DIR ARGS...: a gated/fork_exec app with the agent
# preloaded, under timeout; waits for DIR/ready. APP is its pid.
APP=""
start_app() {
	local name=$1 dir=$2
	shift 2
	mkdir -p "$dir"
	APP=""
	spawn "$name" "$APP_LIMIT" env LD_PRELOAD="$AGENT" "$@" || return 1
	APP=${PID[$name]}
	wait_file "$dir/ready" 60
}

# count NAME TOOL KERNEL: attach TOOL (-v) to APP for one kernel; waits until
# it has instrumented it. The caller opens the round, then calls stop.
attach() {
	local name=$1 tool=$2 kernel=$3
	case $tool in
	threadhist) spawn "$name" "$TOOL_LIMIT" threadhist -v -k "$kernel" -p "$APP" ;;
	kernel_trace) spawn "$name" "$TOOL_LIMIT" kernel_trace -v --max-events 0 -k "$kernel" -p "$APP" ;;
	*) return 1 ;;
	esac || return 1
	wait_attached "$name" 30
}

# gpu_sm: sm_XX of GPU 0 (sm_90 when nvidia-smi cannot tell).
gpu_sm() {
	local cc
	cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
	echo "sm_${cc:-90}"
}

# ptx_regs BINARY KERNEL: registers ptxas gives KERNEL compiled from the
# binary's PTX with no limit (what the driver's JIT gives an instrumented
# copy); empty when cuobjdump or ptxas is missing.
ptx_regs() {
	command -v cuobjdump >/dev/null && command -v ptxas >/dev/null || return 0
	local d f
	d=$(mktemp -d "$L/ptx.XXXXXX")
	(cd "$d" && cuobjdump -xptx all "$1" >/dev/null 2>&1)
	f=$(find "$d" -name '*.ptx' | head -1)
	[ -n "$f" ] || return 0
	ptxas -arch="$(gpu_sm)" -v "$f" -o "$d/out.cubin" 2>&1 | awk -v k="'$2'" '
		/Compiling entry function/ { cur = index($0, k) > 0 }
		cur && /Used [0-9]+ registers/ { for (i = 1; i <= NF; i++) if ($i == "Used") { print $(i + 1); exit } }'
}

# ---- 1: kill -9 of the tool -------------------------------------------------

group1() {
	local names="1-kill-during-attach 1-kill-while-attached 1-reattach-after-kill"
	need gated || { fail_all "$names" "$NEEDWHY"; return; }
	local G=$L/g1.gates H=4 N=20 d k=0 alive=1 killed_at="" far="" alive2=1 far2="" t
	ref g1 "$S/gated" - "*,$N,5" $T $B $H
	if ! start_app g1.app "$G" "$S/gated" "$G" "*,$N,5" $T $B $H; then
		fail_all "$names" "the app did not start: $(last_line "$L/g1.app.err")"
		return
	fi
	touch "$G/go.1" # round 1 launches from 4 host threads until stop.1
	sleep 0.3
	# during attach: SIGKILL after 0 ms .. 400 ms, alternating tools
	for d in 0 0.003 0.01 0.03 0.06 0.1 0.2 0.4; do
		k=$((k + 1))
		if [ $((k % 2)) = 1 ]; then
			spawn "g1.k$k" "$TOOL_LIMIT" threadhist -v -k gatedA -p "$APP"
		else
			spawn "g1.k$k" "$TOOL_LIMIT" kernel_trace -v --max-events 0 -k gatedA -p "$APP"
		fi
		sleep "$d"
		kill9 "g1.k$k"
		reap "g1.k$k"
		if grep -q 'instrumented (' "$L/g1.k$k.err"; then
			far+=" activated"
		elif grep -q "process $APP: agent" "$L/g1.k$k.err"; then
			far+=" hello"
		else
			far+=" start"
		fi
		sleep 0.2
		if ! kill -0 "$APP" 2>/dev/null; then
			alive=0 killed_at="kill #$k (after ${d} s)"
			break
		fi
	done
	# while attached: three tools, each SIGKILLed 0.5 s after it instrumented
	if [ $alive = 1 ]; then
		for t in threadhist kernel_trace gpubpf; do
			if [ $t = gpubpf ]; then
				spawn g1.a$t "$TOOL_LIMIT" gpubpf run -v -k gatedA -p "$APP" bpf/examples/counter_bpfel.o
				wait_attached g1.a$t 30
			else
				attach g1.a$t $t gatedA
			fi && far2+=" $t" || far2+=" $t(not-attached:$(last_line "$L/g1.a$t.err"))"
			sleep 0.5
			kill9 g1.a$t
			reap g1.a$t
			sleep 0.2
			if ! kill -0 "$APP" 2>/dev/null; then
				alive2=0 killed_at="the kill of $t while attached"
				break
			fi
		done
	fi
	touch "$G/stop.1"
	local rok=0 runs="" want=$((N * H * TB))
	if wait_file "$G/done.1" 60; then
		# re-attach: a new tool counts round 2 exactly
		if attach g1.re threadhist gatedA; then
			touch "$G/go.2"
			wait_file "$G/done.2" 60
			stop g1.re
			runs=$(runs_of g1.re)
			[ "$runs" = "$want" ] && [ "${RC[g1.re]}" = 0 ] && rok=1
		else
			runs="(not attached: $(last_line "$L/g1.re.err"))"
			touch "$G/go.2"
		fi
	fi
	touch "$G/go.2" "$G/go.3"
	ends_within g1.app 60 || stop g1.app
	app_check g1 "$L/g1.app.out" "${RC[g1.app]}"
	local re="a tool attached afterwards counted $runs of $want runs of round 2"
	if [ $alive = 0 ]; then
		verdict 1-kill-during-attach FAIL "the app died at $killed_at: $(last_line "$L/g1.app.err")"
	elif [ -n "$APPWHY" ]; then
		verdict 1-kill-during-attach FAIL "app: $APPWHY"
	elif [ $rok = 0 ]; then
		verdict 1-kill-during-attach FAIL "app unharmed, but $re"
	else
		verdict 1-kill-during-attach PASS "8 tools killed at:$far; app unharmed; $re"
	fi
	if [ $alive = 0 ]; then
		verdict 1-kill-while-attached FAIL "not run: the app died earlier"
	elif [ $alive2 = 0 ]; then
		verdict 1-kill-while-attached FAIL "the app died at $killed_at: $(last_line "$L/g1.app.err")"
	elif [ -n "$APPWHY" ]; then
		verdict 1-kill-while-attached FAIL "app: $APPWHY"
	elif [[ $far2 == *not-attached* ]]; then
		verdict 1-kill-while-attached FAIL "a tool never attached:$far2"
	elif [ $rok = 0 ]; then
		verdict 1-kill-while-attached FAIL "app unharmed, but $re"
	else
		verdict 1-kill-while-attached PASS "killed while instrumenting:$far2; app unharmed"
	fi
	if [ -n "$APPWHY" ]; then
		verdict 1-reattach-after-kill FAIL "app: $APPWHY"
	elif [ $rok = 0 ]; then
		verdict 1-reattach-after-kill FAIL "$re (tool rc ${RC[g1.re]:-none}: $(last_line "$L/g1.re.err"))"
	else
		verdict 1-reattach-after-kill PASS "$re; app unharmed"
	fi
}

# ---- 2: the app exits, forks, execs, launches from many threads -------------

group2() {
	local G n want runs ended secs msg
	# 2a: the app exits while a tool is attached
	n=2-app-exits-while-attached G=$L/g2a.gates
	if ! need gated; then
		verdict $n FAIL "$NEEDWHY"
	else
		ref g2a "$S/gated" - 10 $T $B 1
		want=$((10 * TB))
		if ! start_app g2a.app "$G" "$S/gated" "$G" 10 $T $B 1 || ! attach g2a.t threadhist gatedA; then
			verdict $n FAIL "setup: $(last_line "$L/g2a.app.err") $(last_line "$L/g2a.t.err")"
		else
			touch "$G/go.1"
			ends_within g2a.app 60 || stop g2a.app
			SECONDS=0
			ended=0
			ends_within g2a.t 20 && ended=1
			secs=$SECONDS
			[ $ended = 1 ] || stop g2a.t
			runs=$(runs_of g2a.t)
			app_check g2a "$L/g2a.app.out" "${RC[g2a.app]}"
			msg=$(grep -E "(PID|process) $APP([^0-9]|\$).*exited" "$L/g2a.t.err" | head -1)
			if [ -n "$APPWHY" ]; then
				verdict $n FAIL "app: $APPWHY"
			elif [ $ended = 0 ]; then
				verdict $n FAIL "the tool did not end by itself within 20 s of the app's exit"
			elif [ "$runs" != "$want" ] || [ "${RC[g2a.t]}" != 0 ]; then
				verdict $n FAIL "the tool (rc ${RC[g2a.t]}) counted ${runs:-no} of $want runs of the app's last round"
			elif [ -z "$msg" ]; then
				verdict $n FAIL "the tool ended by itself ${secs} s after the app (rc 0, $runs of $want runs) but said nothing about PID $APP exiting; its last line: $(last_line "$L/g2a.t.err")"
			else
				verdict $n PASS "ended ${secs} s after the app, $runs of $want runs: $msg"
			fi
		fi
	fi

	# 2b: the app forks a CPU-only child and a child that execs and launches
	n=2-fork-while-attached G=$L/g2b.gates
	if ! need fork_exec; then
		verdict $n FAIL "$NEEDWHY"
	else
		ref g2b "$S/fork_exec" fork - 20
		want=$((2 * 20 * TB))
		if ! start_app g2b.app "$G" "$S/fork_exec" fork "$G" 20 || ! attach g2b.t threadhist forkParent; then
			verdict $n FAIL "setup: $(last_line "$L/g2b.app.err") $(last_line "$L/g2b.t.err")"
		else
			touch "$G/go.1"
			ends_within g2b.app 90 || stop g2b.app
			ended=0
			ends_within g2b.t 20 && ended=1
			[ $ended = 1 ] || stop g2b.t
			runs=$(runs_of g2b.t)
			app_check g2b "$L/g2b.app.out" "${RC[g2b.app]}"
			if [ -n "$APPWHY" ]; then
				verdict $n FAIL "app: $APPWHY"
			elif [ "$runs" != "$want" ]; then
				verdict $n FAIL "the tool (rc ${RC[g2b.t]}) counted ${runs:-no} of $want runs of forkParent (before and after the fork)"
			elif [ $ended = 0 ]; then
				verdict $n FAIL "counts exact, but the tool did not end by itself within 20 s of the app's exit"
			else
				verdict $n PASS "$runs of $want parent runs counted across the fork; children unharmed (CHILD line and both exit statuses checked by the app)"
			fi
		fi
	fi

	# 2c: the app execs itself (same PID) while a tool is attached
	n=2-exec-while-attached G=$L/g2c.gates
	if ! need fork_exec; then
		verdict $n FAIL "$NEEDWHY"
	else
		ref g2c "$S/fork_exec" exec - 20
		want=$((20 * TB))
		local before="" after="" aend=0
		if ! start_app g2c.app "$G" "$S/fork_exec" exec "$G" 20 ||
			! spawn g2c.a "$TOOL_LIMIT" threadhist -v -j -i 1 -k execBefore -p "$APP" || ! wait_attached g2c.a 30; then
			verdict $n FAIL "setup: $(last_line "$L/g2c.app.err") $(last_line "$L/g2c.a.err")"
		else
			touch "$G/go.1"
			wait_file "$G/done.1" 60
			sleep 2.5 # an interval report of the pre-exec launches
			touch "$G/go.2"
			wait_file "$G/ready.child" 60
			ends_within g2c.a 15 && aend=1
			[ $aend = 1 ] || stop g2c.a
			before=$(python3 "$UTIL" jsonsum "$L/g2c.a.out" kernel runs mangled=execBefore)
			# a new tool on the new program image (same PID)
			if attach g2c.b threadhist forkChild; then
				touch "$G/go.child"
				ends_within g2c.app 60 || stop g2c.app
				ends_within g2c.b 20 || stop g2c.b
				after=$(runs_of g2c.b)
			else
				after="(not attached: $(last_line "$L/g2c.b.err"))"
				touch "$G/go.child"
				ends_within g2c.app 60 || stop g2c.app
				stop g2c.b
			fi
			app_check g2c "$L/g2c.app.out" "${RC[g2c.app]}"
			if [ -n "$APPWHY" ]; then
				verdict $n FAIL "app: $APPWHY"
			elif [ $aend = 0 ]; then
				verdict $n FAIL "the tool attached before the exec did not end by itself within 15 s of it (the program image it instrumented is gone)"
			elif [ "$before" != "$want" ]; then
				verdict $n FAIL "the tool attached before the exec reported $before of $want runs of execBefore"
			elif [ "$after" != "$want" ]; then
				verdict $n FAIL "a tool attached to the exec'd program counted $after of $want runs of forkChild"
			else
				verdict $n PASS "before the exec $before/$want runs, the tool ended by itself ($(last_line "$L/g2c.a.err")); after it a new tool counted $after/$want"
			fi
		fi
	fi

	# 2d: 8 host threads launching while a tool attaches, then a counted round
	n=2-many-threads-while-attached G=$L/g2d.gates
	if ! need gated; then
		verdict $n FAIL "$NEEDWHY"
	else
		local H=8 N=10
		ref g2d "$S/gated" - "*,$N" $T $B $H
		want=$((N * H * TB))
		if ! start_app g2d.app "$G" "$S/gated" "$G" "*,$N" $T $B $H; then
			verdict $n FAIL "setup: $(last_line "$L/g2d.app.err")"
		else
			touch "$G/go.1"
			sleep 0.3
			local first=ok
			attach g2d.a threadhist gatedA || first="not attached under load: $(last_line "$L/g2d.a.err")"
			sleep 1
			if ! stop g2d.a; then
				first="did not end on SIGINT"
			elif [ "$first" = ok ] && [ "${RC[g2d.a]}" != 0 ]; then
				first="exit status ${RC[g2d.a]}: $(last_line "$L/g2d.a.err")"
			fi
			touch "$G/stop.1"
			wait_file "$G/done.1" 60
			runs=""
			if attach g2d.b threadhist gatedA; then
				touch "$G/go.2"
				wait_file "$G/done.2" 60
				stop g2d.b
				runs=$(runs_of g2d.b)
			fi
			touch "$G/go.2"
			ends_within g2d.app 60 || stop g2d.app
			app_check g2d "$L/g2d.app.out" "${RC[g2d.app]}"
			if [ -n "$APPWHY" ]; then
				verdict $n FAIL "app: $APPWHY"
			elif [ "$first" != ok ]; then
				verdict $n FAIL "the tool attached while 8 threads launched: $first"
			elif [ "$runs" != "$want" ]; then
				verdict $n FAIL "a tool counted ${runs:-no} of $want runs of a round launched from 8 threads ($(last_line "$L/g2d.b.err"))"
			else
				verdict $n PASS "attached and detached while 8 threads launched; then $runs of $want runs from 8 threads"
			fi
		fi
	fi
}

# ---- 3: two tools -----------------------------------------------------------

group3() {
	local names="3-two-tools-two-kernels 3-two-tools-one-kernel"
	need gated || { fail_all "$names" "$NEEDWHY"; return; }
	local G=$L/g3.gates H=2 N=10 want ra rb why1="" why2="" brc
	want=$((N * H * TB))
	ref g3 "$S/gated" - "$N,$N,5" $T $B $H
	if ! start_app g3.app "$G" "$S/gated" "$G" "$N,$N,5" $T $B $H; then
		fail_all "$names" "setup: $(last_line "$L/g3.app.err")"
		return
	fi
	# two tools on two kernels of one process
	if attach g3.a threadhist gatedA && attach g3.b kernel_trace gatedB; then
		touch "$G/go.1"
		wait_file "$G/done.1" 60
		stop g3.a
		stop g3.b
		ra=$(runs_of g3.a) rb=$(entries_of g3.b)
		[ "$ra" = "$want" ] && [ "$rb" = "$want" ] ||
			why1="threadhist on gatedA counted ${ra:-no} of $want runs, kernel_trace on gatedB ${rb:-no} of $want entries"
	else
		why1="setup: $(last_line "$L/g3.a.err") $(last_line "$L/g3.b.err")"
		stop g3.a
		stop g3.b
	fi
	touch "$G/go.1"
	wait_file "$G/done.1" 60
	# two tools on one kernel: both count, or the second refuses clearly
	local refused=""
	if attach g3.c threadhist gatedA; then
		attach g3.d kernel_trace gatedA
		if ! running g3.d; then
			reap g3.d
			refused=$(last_line "$L/g3.d.err")
		fi
		touch "$G/go.2"
		wait_file "$G/done.2" 60
		stop g3.c
		stop g3.d
		ra=$(runs_of g3.c) rb=$(entries_of g3.d) brc=${RC[g3.d]}
		# The agent refuses a second tool's probe on a kernel another tool
		# has; the tool says so and may run on for other kernels.
		[ -n "$refused" ] || refused=$(grep -m1 'already instrumented by another gpubpf tool' "$L/g3.d.err")
		if [ -n "$refused" ]; then
			[ "$ra" = "$want" ] || why2="the second tool refused ($refused), but the first then counted ${ra:-no} of $want runs"
		elif [ "$ra" != "$want" ] || [ "$rb" != "$want" ]; then
			why2="threadhist (attached first) counted ${ra:-no} of $want runs of gatedA, kernel_trace (second, rc $brc) ${rb:-no} of $want entries: the second tool neither refused nor shared the kernel"
		fi
	else
		why2="setup: $(last_line "$L/g3.c.err")"
	fi
	touch "$G/go.2" "$G/go.3"
	ends_within g3.app 60 || stop g3.app
	app_check g3 "$L/g3.app.out" "${RC[g3.app]}"
	if [ -n "$APPWHY" ]; then
		fail_all "$names" "app: $APPWHY"
		return
	fi
	if [ -n "$why1" ]; then verdict 3-two-tools-two-kernels FAIL "$why1"; else
		verdict 3-two-tools-two-kernels PASS "threadhist on gatedA $want/$want runs and kernel_trace on gatedB $want/$want entries at once; app unharmed"
	fi
	if [ -n "$why2" ]; then
		verdict 3-two-tools-one-kernel FAIL "$why2"
	elif [ -n "$refused" ]; then
		verdict 3-two-tools-one-kernel PASS "the second tool refused: $refused; the first counted $want/$want"
	else
		verdict 3-two-tools-one-kernel PASS "both tools counted $want/$want on gatedA; app unharmed"
	fi
}

# ---- 4: the driver refuses the instrumented copy ----------------------------

group4() {
	local names="4-register-limit-launch-refused 4-param-space-jit-rejected"
	need jit_limits || { fail_all "$names" "$NEEDWHY"; return; }
	local n=4-register-limit-launch-refused regs pre="" runs
	ref g4 "$S/jit_limits" 3
	regs=$(ptx_regs "$S/jit_limits" regHeavy)
	pre="ptxas not run"
	[ -n "$regs" ] && pre="regHeavy's PTX compiles to $regs registers unlimited (x 1024 threads: the copy needs $((regs * 1024)) of 65536)"
	run g4a "$TOOL_LIMIT" threadhist -k regHeavy -- "$S/jit_limits" 3
	app_check g4 "$L/g4a.out" "${RC[g4a]}" --sub
	runs=$(runs_of g4a)
	if [ -n "$APPWHY" ]; then
		verdict $n FAIL "app: $APPWHY"
	elif grep -q 'refused by the driver' "$L/g4a.err" && grep -qE 'CUresult 701|too many resources|OUT_OF_RESOURCES' "$L/g4a.err"; then
		verdict $n PASS "$(grep -m1 -oE '[^:]*instrumented launch failed[^;]*' "$L/g4a.err" || grep -m1 -o '[0-9]* launches refused by the driver[^,]*' "$L/g4a.err"); app correct (original ran); $pre"
	elif [ "$runs" = $((3 * 4 * 1024)) ]; then
		verdict $n PASS "recovered: the instrumented copy launched and counted $runs runs exactly; $pre"
	elif [ -n "$regs" ] && [ "$regs" -le 64 ]; then
		verdict $n FAIL "precondition: $pre: the sample does not provoke a refused launch (fix samples/jit_limits.cu); tool: $(last_line "$L/g4a.err")"
	else
		verdict $n FAIL "no refusal with the driver's reason (CUresult 701) and no exact count ($runs); $pre; tool: $(last_line "$L/g4a.err")"
	fi

	n=4-param-space-jit-rejected
	if ! grep -q 'bigparam=1' "$L/g4.ref"; then
		verdict $n SKIP "jit_limits was built without bigParam (a toolkit before CUDA 12.1: 4 KiB of parameters)"
		return
	fi
	run g4b "$TOOL_LIMIT" gpubpf run -k bigParam bpf/testdata/launchword.bpf.o -- "$S/jit_limits" 3
	app_check g4 "$L/g4b.out" "${RC[g4b]}" --sub
	local skipped
	skipped=$(grep -o 'skipped: [^;]*bigParam.*' "$L/g4b.err" | head -1 | cut -c1-300)
	if [ -n "$APPWHY" ]; then
		verdict $n FAIL "app: $APPWHY"
	elif [ -n "$skipped" ] && echo "$skipped" | grep -qi 'param'; then
		verdict $n PASS "$skipped; app correct (original ran)"
	elif grep -q 'refused by the driver' "$L/g4b.err"; then
		verdict $n PASS "refused at launch instead: $(grep -m1 -o 'instrumented launch failed[^;]*' "$L/g4b.err"); app correct"
	else
		verdict $n FAIL "bigParam (32760 bytes of parameters + 16 of launch words) not reported as skipped with the driver's reason: $(last_line "$L/g4b.err")"
	fi
}

# ---- 5: ring overflow -------------------------------------------------------

group5() {
	local n=5-ring-overflow rec p d x r other=""
	need vec_add || { verdict $n FAIL "$NEEDWHY"; return; }
	ref g5 "$S/vec_add" 100000 20 512 196
	run g5 180 gpubpf run --summary --ring-mb 1 bpf/examples/trace_bpfel.o -- "$S/vec_add" 100000 20 512 196
	app_check g5 "$L/g5.out" "${RC[g5]}" --sub
	rec=$(python3 "$UTIL" records "$L/g5.err")
	read -r p d x r <<<"$rec"
	[ "${r:-0}" != 0 ] && other=" + $r discarded or not read"
	if [ -n "$APPWHY" ]; then
		verdict $n FAIL "app: $APPWHY"
	elif [ "$rec" = none ] || [ -z "$rec" ]; then
		verdict $n FAIL "no record account on stderr: $(last_line "$L/g5.err")"
	elif [ "$x" = 0 ]; then
		verdict $n FAIL "no drops with a 1 MiB ring for 21 x 100352 records: $p produced = $d delivered + 0 dropped"
	elif [ "$p" != $((d + x + r)) ]; then
		verdict $n FAIL "account does not add up: $p produced != $d delivered + $x dropped + $r"
	else
		verdict $n PASS "$p produced = $d delivered + $x dropped (ring full)$other; app unchanged"
	fi
}

# ---- 6: SASS-only kernel ----------------------------------------------------

group6() {
	local n=6-sass-only-kernel nptx
	need sass_only || { verdict $n FAIL "$NEEDWHY"; return; }
	if command -v cuobjdump >/dev/null; then
		nptx=$(cuobjdump -lptx "$S/sass_only" 2>/dev/null | grep -c '^PTX file')
		if [ "$nptx" != 0 ]; then
			verdict $n FAIL "precondition: $S/sass_only embeds $nptx PTX (samples/Makefile builds it SASS only)"
			return
		fi
	fi
	ref g6 "$S/sass_only" 4096 3
	# (the sanitizer path, which would trace it, is off here: sanitizer-check.sh)
	run g6 "$TOOL_LIMIT" env GPUBPF_SANITIZER=off threadhist -- "$S/sass_only" 4096 3
	run g6k 60 gpubpf kernels "$S/sass_only"
	app_check g6 "$L/g6.out" "${RC[g6]}" --sub
	if [ -n "$APPWHY" ]; then
		verdict $n FAIL "app: $APPWHY"
	elif grep -q 'SASS only, no PTX' "$L/g6.err" && grep -q 'sassScale' "$L/g6.err"; then
		verdict $n PASS "$(grep -o '[0-9]* kernels skipped: [^;]*' "$L/g6.err" | head -1 | cut -c1-200); app unchanged"
	else
		verdict $n FAIL "sassScale not listed as skipped for having no PTX: $(last_line "$L/g6.err")"
	fi
}

# ---- 7: modules that are not fatbins ----------------------------------------

group7() {
	local names="7-ptx-text-module 7-raw-cubin-module" runs want=$((3 * TB))
	need modload || { fail_all "$names" "$NEEDWHY"; return; }
	ref g7 "$S/modload" 3
	run g7 "$TOOL_LIMIT" threadhist -k ptxScale -k cubinScale -- "$S/modload" 3
	app_check g7 "$L/g7.out" "${RC[g7]}" --sub
	if [ -n "$APPWHY" ]; then
		fail_all "$names" "app: $APPWHY"
		return
	fi
	runs=$(runs_of g7)
	if [ "$runs" = "$want" ]; then
		verdict 7-ptx-text-module PASS "ptxScale (cuModuleLoadData of PTX text) instrumented: $runs of $want runs"
	else
		verdict 7-ptx-text-module FAIL "ptxScale from a PTX-text module: ${runs:-no} of $want runs counted: $(last_line "$L/g7.err")"
	fi
	if grep -q 'SASS only, no PTX' "$L/g7.err" && grep -q 'cubinScale' "$L/g7.err"; then
		verdict 7-raw-cubin-module PASS "$(grep -o '[0-9]* kernels skipped: [^;]*' "$L/g7.err" | head -1 | cut -c1-200)"
	else
		verdict 7-raw-cubin-module FAIL "cubinScale (cuModuleLoadData of a raw cubin) not listed as skipped for having no PTX: $(last_line "$L/g7.err")"
	fi
}

# ---- 8: corrupt BPF objects -------------------------------------------------

group8() {
	local names="8-corrupt-object-truncated 8-corrupt-object-random 8-corrupt-object-empty 8-corrupt-object-elf-garbage 8-corrupt-object-with-p"
	need vec_add gated || { fail_all "$names" "$NEEDWHY"; return; }
	local D=$L/g8.objs c obj
	mkdir -p "$D"
	head -c 1000 bpf/examples/counter_bpfel.o >"$D/truncated.o"
	python3 -c 'import random,sys; r=random.Random(8); sys.stdout.buffer.write(bytes(r.getrandbits(8) for _ in range(4096)))' >"$D/random.o"
	: >"$D/empty.o"
	{ head -c 20 bpf/examples/counter_bpfel.o; python3 -c 'import random,sys; r=random.Random(9); sys.stdout.buffer.write(bytes(r.getrandbits(8) for _ in range(2048)))'; } >"$D/elf-garbage.o"
	ref g8 "$S/vec_add" 1000 10 256 4
	for c in truncated random empty elf-garbage; do
		obj=$D/$c.o
		run "g8-$c" 60 gpubpf run "$obj" -- "$S/vec_add" 1000 10 256 4
		if [ "${RC[g8-$c]}" != 1 ]; then
			verdict "8-corrupt-object-$c" FAIL "gpubpf run exit status ${RC[g8-$c]} (want 1): $(last_line "$L/g8-$c.err")"
		elif ! grep -qE "$obj is not (a BPF object gpubpf can read|an ELF file, so not a BPF object)" "$L/g8-$c.err"; then
			verdict "8-corrupt-object-$c" FAIL "no error naming the file: $(last_line "$L/g8-$c.err")"
		elif grep -q '^RESULT' "$L/g8-$c.out"; then
			verdict "8-corrupt-object-$c" FAIL "the app was started although the object is unreadable"
		else
			verdict "8-corrupt-object-$c" PASS "$(last_line "$L/g8-$c.err"); app never started"
		fi
	done
	# -p: a running app, a corrupt object
	local G=$L/g8.gates
	ref g8p "$S/gated" - "*,5" $T $B 1
	if ! start_app g8p.app "$G" "$S/gated" "$G" "*,5" $T $B 1; then
		verdict 8-corrupt-object-with-p FAIL "setup: $(last_line "$L/g8p.app.err")"
		return
	fi
	touch "$G/go.1"
	run g8p 60 gpubpf run -p "$APP" "$D/truncated.o"
	touch "$G/stop.1" "$G/go.2"
	ends_within g8p.app 60 || stop g8p.app
	app_check g8p "$L/g8p.app.out" "${RC[g8p.app]}"
	if [ -n "$APPWHY" ]; then
		verdict 8-corrupt-object-with-p FAIL "app: $APPWHY"
	elif [ "${RC[g8p]}" != 1 ] || ! grep -qE "$D/truncated.o is not (a BPF object gpubpf can read|an ELF file, so not a BPF object)" "$L/g8p.err"; then
		verdict 8-corrupt-object-with-p FAIL "rc ${RC[g8p]}: $(last_line "$L/g8p.err")"
	else
		verdict 8-corrupt-object-with-p PASS "$(last_line "$L/g8p.err"); the running app unharmed"
	fi
}

# ---- 9: garbage on the agent socket -----------------------------------------

group9() {
	local n=9-socket-garbage G=$L/g9.gates H=2 N=10 want frc runs=""
	need gated || { verdict $n FAIL "$NEEDWHY"; return; }
	want=$((N * H * TB))
	ref g9 "$S/gated" - "*,$N,5" $T $B $H
	if ! start_app g9.app "$G" "$S/gated" "$G" "*,$N,5" $T $B $H; then
		verdict $n FAIL "setup: $(last_line "$L/g9.app.err")"
		return
	fi
	touch "$G/go.1" # the app launches from 2 threads all along
	timeout -k 5 300 python3 "$FUZZ" fuzz "$APP" >"$L/g9.fuzz" 2>&1
	frc=$?
	local alive=1
	kill -0 "$APP" 2>/dev/null || alive=0
	touch "$G/stop.1"
	wait_file "$G/done.1" 60
	if [ $alive = 1 ] && attach g9.t threadhist gatedA; then
		touch "$G/go.2"
		wait_file "$G/done.2" 60
		stop g9.t
		runs=$(runs_of g9.t)
	fi
	touch "$G/go.2" "$G/go.3"
	ends_within g9.app 60 || stop g9.app
	app_check g9 "$L/g9.app.out" "${RC[g9.app]}"
	if [ $alive = 0 ]; then
		verdict $n FAIL "the app died during the fuzzing: $(last_line "$L/g9.app.err"); fuzzer: $(last_line "$L/g9.fuzz")"
	elif [ -n "$APPWHY" ]; then
		verdict $n FAIL "app: $APPWHY"
	elif [ $frc != 0 ]; then
		verdict $n FAIL "fuzzer rc $frc: $(grep -m2 '^FAIL' "$L/g9.fuzz" | tr '\n' ' ')$(last_line "$L/g9.fuzz")"
	elif [ "$runs" != "$want" ]; then
		verdict $n FAIL "after the fuzzing a tool counted ${runs:-no} of $want runs: $(last_line "$L/g9.t.err")"
	else
		verdict $n PASS "$(last_line "$L/g9.fuzz") (one reply per request, 100 connections, 64 MiB frames); then a tool counted $runs/$want; app unharmed"
	fi
}

# ---- 10: another uid --------------------------------------------------------

group10() {
	local names="10-other-uid-refused 10-other-uid-no-access 10-tool-as-other-uid"
	need gated || { fail_all "$names" "$NEEDWHY"; return; }
	if [ "$(id -u)" != 0 ]; then
		local w
		for w in $names; do verdict "$w" SKIP "not root here: cannot run a client as another uid"; done
		return
	fi
	local -a as
	if command -v setpriv >/dev/null; then
		as=(setpriv --reuid=65534 --regid=65534 --clear-groups)
	elif command -v runuser >/dev/null && getent passwd nobody >/dev/null; then
		as=(runuser -u nobody --)
	else
		local w
		for w in $names; do verdict "$w" SKIP "neither setpriv nor runuser (with a nobody user) to switch to another uid"; done
		return
	fi
	local py="" p
	for p in /usr/bin/python3 "$(command -v python3)"; do
		[ -n "$p" ] && "${as[@]}" "$p" -c pass 2>/dev/null && {
			py=$p
			break
		}
	done
	local X
	X=$(mktemp -d /tmp/gpubpf-faults.XXXXXX)
	chmod 755 "$X"
	# what the other uid runs, where it may read it
	cp "$FUZZ" "$X/agent_fuzz.py"
	cp "$BIN/threadhist" "$X/threadhist"
	chmod 644 "$X/agent_fuzz.py"
	chmod 755 "$X/threadhist"
	mkdir -m 755 "$X/sock"
	local G=$L/g10a.gates N=10 want=$((10 * TB)) out trc runs=""
	# 10a: a socket directory others can reach: the agent's own check refuses
	ref g10a "$S/gated" - "*,$N,5" $T $B 1
	if ! GPUBPF_AGENT_SOCKET_DIR=$X/sock start_app g10a.app "$G" "$S/gated" "$G" "*,$N,5" $T $B 1; then
		fail_all "10-other-uid-refused 10-tool-as-other-uid" "setup: $(last_line "$L/g10a.app.err")"
	else
		touch "$G/go.1"
		if [ -n "$py" ]; then
			out=$(GPUBPF_AGENT_SOCKET_DIR=$X/sock timeout 60 "${as[@]}" "$py" "$X/agent_fuzz.py" refused "$APP" 2>&1)
		else
			out="no python3 that uid 65534 may run"
		fi
		# a tool run as that user
		GPUBPF_AGENT_SOCKET_DIR=$X/sock run g10t 60 "${as[@]}" "$X/threadhist" -p "$APP"
		trc=${RC[g10t]}
		touch "$G/stop.1"
		wait_file "$G/done.1" 60
		if GPUBPF_AGENT_SOCKET_DIR=$X/sock attach g10a.t threadhist gatedA; then
			touch "$G/go.2"
			wait_file "$G/done.2" 60
			stop g10a.t
			runs=$(runs_of g10a.t)
		fi
		touch "$G/go.2" "$G/go.3"
		ends_within g10a.app 60 || stop g10a.app
		app_check g10a "$L/g10a.app.out" "${RC[g10a.app]}"
		if [ -n "$APPWHY" ]; then
			fail_all "10-other-uid-refused 10-tool-as-other-uid" "app: $APPWHY"
		else
			if [ -z "$py" ]; then
				verdict 10-other-uid-refused SKIP "$out"
			elif [[ $out != REFUSED:* ]]; then
				verdict 10-other-uid-refused FAIL "uid 65534: $out"
			elif ! grep -q "refused a control connection from uid 65534" "$L/g10a.app.err"; then
				verdict 10-other-uid-refused FAIL "$out, but the agent logged no refusal on the app's stderr"
			elif [ "$runs" != "$want" ]; then
				verdict 10-other-uid-refused FAIL "$out; afterwards root's tool counted ${runs:-no} of $want runs"
			else
				verdict 10-other-uid-refused PASS "$out; logged: $(grep -m1 -o 'refused a control connection from uid 65534[^:]*' "$L/g10a.app.err"); root's tool then counted $runs/$want"
			fi
			if [ "$trc" = 0 ]; then
				verdict 10-tool-as-other-uid FAIL "threadhist -p as uid 65534 exited 0: $(last_line "$L/g10t.err")"
			elif grep -qiE 'needs root|refused|only root|not allowed to' "$L/g10t.err"; then
				verdict 10-tool-as-other-uid PASS "rc $trc: $(last_line "$L/g10t.err")"
			else
				verdict 10-tool-as-other-uid FAIL "rc $trc without saying why: $(last_line "$L/g10t.err")"
			fi
		fi
	fi
	# 10b: the default directory (/run/gpubpf, 0700): no way in at all
	G=$L/g10b.gates
	ref g10b "$S/gated" - "*,3" $T $B 1
	if [ -n "${GPUBPF_AGENT_SOCKET_DIR:-}" ]; then
		verdict 10-other-uid-no-access SKIP "GPUBPF_AGENT_SOCKET_DIR is set here: the default directory is not in use"
	elif [ -z "$py" ]; then
		verdict 10-other-uid-no-access SKIP "no python3 that uid 65534 may run"
	elif ! start_app g10b.app "$G" "$S/gated" "$G" "*,3" $T $B 1; then
		verdict 10-other-uid-no-access FAIL "setup: $(last_line "$L/g10b.app.err")"
	else
		touch "$G/go.1"
		out=$(timeout 60 "${as[@]}" "$py" "$X/agent_fuzz.py" refused "$APP" 2>&1)
		local mode
		mode=$(stat -c '%a %U' /run/gpubpf 2>/dev/null)
		touch "$G/stop.1" "$G/go.2"
		ends_within g10b.app 60 || stop g10b.app
		app_check g10b "$L/g10b.app.out" "${RC[g10b.app]}"
		if [ -n "$APPWHY" ]; then
			verdict 10-other-uid-no-access FAIL "app: $APPWHY"
		elif [[ $out != REFUSED:* ]]; then
			verdict 10-other-uid-no-access FAIL "uid 65534 (/run/gpubpf: $mode): $out"
		else
			verdict 10-other-uid-no-access PASS "$out (/run/gpubpf: $mode)"
		fi
	fi
	rm -rf "$X"
}

# ---- self test (no GPU) -----------------------------------------------------

selftest() {
	L=$(mktemp -d /tmp/gpubpf-faults-selftest.XXXXXX)
	local bad=0
	st() { # NAME OK? WHY
		if [ "$2" = 0 ]; then echo "selftest ok   $1"; else
			echo "selftest FAIL $1: $3"
			bad=1
		fi
	}
	# kill -9 reaches the program under timeout, not timeout
	spawn st-kill 30 sleep 30
	kill -KILL "${PID[st-kill]}"
	reap st-kill
	[ "${RC[st-kill]}" = 137 ]
	st "kill -9 of a spawned program (rc ${RC[st-kill]})" $? "want 137"
	# SIGINT reaches a background program (bash ignores it in background jobs
	# of a script; timeout must hand it on as default)
	spawn st-int 30 bash -c "trap 'echo got-int; exit 0' INT; touch $L/int.ready; while :; do sleep 0.05; done"
	wait_file "$L/int.ready" 10
	stop st-int
	[ "${RC[st-int]}" = 0 ] && grep -q got-int "$L/st-int.out"
	st "SIGINT to a spawned program (rc ${RC[st-int]})" $? "it did not see SIGINT"
	# ends_within: a program that goes on is not ended; one that ends is
	spawn st-long 30 sleep 30
	! ends_within st-long 0.3
	st "ends_within on a running program" $? "said it ended"
	stop st-long
	spawn st-short 30 sleep 0.2
	ends_within st-short 5 && [ "${RC[st-short]}" = 0 ]
	st "ends_within on a program that ends" $? "rc ${RC[st-short]}"
	# wait_attached sees a tool's verbose line; gives up when it exits
	spawn st-att 30 bash -c 'sleep 0.2; echo "process 7: gatedA instrumented (1 handle(s), JIT 6.0 ms)" >&2; sleep 30'
	wait_attached st-att 10
	st "wait_attached" $? "missed the line"
	stop st-att
	spawn st-gone 30 bash -c 'echo nothing >&2'
	! wait_attached st-gone 10
	st "wait_attached on a tool that exits" $? "said attached"
	# app_check and runs_of
	printf 'READY\nROUND 1 ok steps=2\nRESULT gated ok rounds=1 checksum=7\n' >"$L/x.ref"
	REFRC[x]=0
	cp "$L/x.ref" "$L/x.out"
	app_check x "$L/x.out" 0
	st "app_check same output" $? "$APPWHY"
	printf 'READY\nRESULT gated FAIL reason=wrong_result round=1 wrong=3\n' >"$L/y.out"
	! app_check x "$L/y.out" 1
	st "app_check different output ($APPWHY)" $? "passed"
	printf 'Tracing...\nREADY\n{"type":"kernel"}\nROUND 1 ok steps=2\nRESULT gated ok rounds=1 checksum=7\nthreadhist: 2048 thread runs counted, 0 runs not counted\n' >"$L/z.out"
	app_check x "$L/z.out" 0 --sub
	st "app_check --sub" $? "$APPWHY"
	cp "$L/z.out" "$L/z.err"
	[ "$(runs_of z)" = 2048 ]
	st "runs_of" $? "got $(runs_of z)"
	python3 "$UTIL" selftest >/dev/null
	st "faults_util.py selftest" $? "failed"
	python3 -c 'import ast, sys; ast.parse(open(sys.argv[1]).read())' "$FUZZ" 2>/dev/null
	st "agent_fuzz.py parses" $? "syntax error"
	rm -rf "$L"
	[ $bad = 0 ] && echo "selftest: ok"
	return $bad
}

# ---- main -------------------------------------------------------------------

if [ "${1:-}" = --selftest ]; then
	selftest
	exit
fi
for b in gpubpf threadhist kernel_trace; do
	[ -x "$BIN/$b" ] || {
		echo "missing $BIN/$b (make gpu-bundle on a build machine)"
		exit 1
	}
done
[ -f "$AGENT" ] || {
	echo "missing $AGENT (make agent)"
	exit 1
}
rm -rf "$L"
mkdir -p "$L"
echo "faults-check: $(date -u +%Y-%m-%dT%H:%MZ) on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1), $(id -un), logs in $L"
SEL=("$@")
[ ${#SEL[@]} -gt 0 ] || SEL=(1 2 3 4 5 6 7 8 9 10)
for g in "${SEL[@]}"; do
	if declare -F "group$g" >/dev/null; then
		echo "---- group $g"
		"group$g"
		cleanup # anything of this group still running
	else
		echo "faults-check: no group $g (1-10)"
		fail=$((fail + 1))
	fi
done
echo "SUMMARY: $pass/$((pass + fail + skip)) fault cases pass, $skip skipped"
[ $fail = 0 ]
