# Shared helpers of the scripts/gpu checks (sourced).

# map_value FILE MAP KEY: value of KEY in map MAP from `gpubpf run -j`
# output, summed over the devices the map was placed on.
map_value() { python3 - "$@" <<'PY'
import json, sys
f, m, k = sys.argv[1:4]
last = {}
for line in open(f):
    try: o = json.loads(line)
    except ValueError: continue
    if o.get("type") == "map" and o.get("map") == m and o.get("key") == k:
        last[(o.get("pid"), o.get("device"))] = int(o.get("value"))
print(sum(last.values()) if last else "missing")
PY
}
summary_field() { python3 - "$@" <<'PY'
import json, sys
f, k = sys.argv[1:3]
v = "missing"
for line in open(f):
    try: o = json.loads(line)
    except ValueError: continue
    if o.get("type") == "summary": v = o.get(k)
print(v)
PY
}


# kus FILE: the CUDA-event kernel time per launch a sample printed, in us.
kus() { grep -ao 'Average CUDA-event kernel time: [0-9.]*' "$1" | awk '{print $NF}'; }

# med V...: the median of the numbers given, 2 decimals ("nan" for none).
med() { python3 -c "import statistics,sys; v=[float(x) for x in sys.argv[1:] if x]; print(f'{statistics.median(v):.2f}' if v else 'nan')" "$@"; }
