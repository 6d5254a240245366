#!/usr/bin/env bash
# launchlate's entry probe in parts, timed by ptxab without the tool: the
# clones come from `gpubpf ptx --into samples/bin/vec_add` (bin/gpubpf and
# samples/bin/vec_add: scripts/gpu-check.sh build), the original from
# cuobjdump -xptx. hstore's map lives in pinned host memory (PTXAB_HOST_MB),
# as launchlate's start table does.
#   scripts/gpu/ptxab/parts.sh [PRESET...]   (tiny medium xlarge by default)
set -euo pipefail
cd "$(dirname "$0")/../../.."
export PATH=$PATH:/usr/local/cuda/bin
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
(cd "$T" && cuobjdump -xptx all "$OLDPWD/samples/bin/vec_add" >/dev/null)
orig=$(ls "$T"/*.ptx | head -1)
O=bpf/bench/parts_launchlate.bpf.o
bin/gpubpf ptx -P empty_entry --into samples/bin/vec_add bpf/bench/bench_empty.bpf.o >"$T/empty.ptx"
V="orig=$orig empty=$T/empty.ptx"
for p in ll_first ll_never ll_const ll_store ll_hstore; do
	bin/gpubpf ptx -P $p --into samples/bin/vec_add $O >"$T/$p.ptx"
	V+=" ${p#ll_}=$T/$p.ptx"
done
declare -A P=([tiny]="32 5000 32 1" [small]="1000 5000 256 4" [medium]="10000 5000 256 40" [large]="100000 1000 512 196" [xlarge]="1000000 1000 512 1954")
for ps in "${@:-tiny medium xlarge}"; do
	for name in $ps; do
		echo "== $name (${P[$name]})"
		# shellcheck disable=SC2086
		PTXAB_HOST_MB=256 scripts/gpu/ptxab/run.sh "${P[$name]}" 5 $V 2>&1 | grep -v 'registers\|kernel records'
	done
done
