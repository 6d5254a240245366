#!/usr/bin/env bash
# What tying CUPTI's kernel records to their launch calls costs, way by way,
# outside the agent (issue 43): scripts/gpu/cupti/cupti_api_cost in each
# mode, ROUNDS alternating rounds of N launches (launch_heavy_sass's loop),
# medians, and the rate as a ratio to the run without CUPTI. setup_ms: how
# long turning the mode on took while another thread launched without pause
# (a program a tool attaches to). joined: kernel records whose launch's API
# record came.
#   scripts/gpu/cuptijoin-bench.sh [N [ROUNDS]]    (defaults 300000 5: 100000 x 3
# varied 0.6-0.8 run to run on the H200)
set -uo pipefail
cd "$(dirname "$0")/../.."
N=${1:-300000} ROUNDS=${2:-5}
T=${GPUBPF_GPU_LOGS:-$(mktemp -d)}/cuptijoin
mkdir -p "$T"
scripts/gpu/cupti/build.sh >"$T/build.txt" 2>&1 || { echo "FAIL cupti build: $(tail -n 3 "$T/build.txt" | tr '\n' ' ')"; exit 1; }
bin=scripts/gpu/cupti/cupti_api_cost
[ -x "$bin" ] || { echo "FAIL $bin not built: $(grep cupti_api_cost "$T/build.txt" | tail -n 3 | tr '\n' ' ')"; exit 1; }
modes=(none records api-after api-before api-all callback)
for r in $(seq "$ROUNDS"); do
	for m in "${modes[@]}"; do
		timeout 60 "$bin" "$m" "$N" >>"$T/runs.txt" 2>>"$T/runs.err" || echo "MODE mode=$m failed rc=$?" >>"$T/runs.txt"
	done
done
python3 - "$T/runs.txt" "${modes[@]}" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    if not line.startswith("MODE"):
        continue
    kv = dict(f.split("=", 1) for f in line.split()[1:])
    runs.setdefault(kv["mode"], []).append(kv)
base = statistics.median(float(r["rate"]) for r in runs.get("none", [{"rate": "nan"}]) if "rate" in r)
bad = 0
for m in sys.argv[2:]:
    rs = [r for r in runs.get(m, []) if "rate" in r]
    if not rs:
        print(f"FAIL {m}: no run finished"); bad += 1; continue
    med = lambda k: statistics.median(float(r[k]) for r in rs)
    print(f"  {m:<10} rate {med('rate'):>9.0f}/s  x{med('rate') / base:.3f}  setup {med('setup_ms'):7.1f} ms  "
          f"kernels {med('kernels'):.0f}  launch API records {med('api_launch'):.0f}  other API records {med('api_other'):.0f}  joined {med('joined'):.0f}")
print(f"SUMMARY: CUPTI join costs over {len(runs.get('none', []))} rounds (launch rate ratio to no CUPTI): " +
      ", ".join(f"{m} x{statistics.median(float(r['rate']) for r in runs[m] if 'rate' in r) / base:.3f}" for m in sys.argv[2:] if m != "none" and runs.get(m)))
sys.exit(1 if bad else 0)
PY
