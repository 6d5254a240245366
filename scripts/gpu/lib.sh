# Shared helpers of the scripts/gpu checks (sourced).

# map_value FILE MAP KEY: value of KEY in map MAP from `gpubpf run -j`
# output, summed over the devices (and contexts of their own) the map was
# placed on; the last record of each stands for it.
map_value() { python3 - "$@" <<'PY'
import json, sys
f, m, k = sys.argv[1:4]
last = {}
for line in open(f):
    try: o = json.loads(line)
    except ValueError: continue
    if o.get("type") == "map" and o.get("map") == m and o.get("key") == k:
        last[(o.get("pid"), o.get("device"), o.get("context"))] = int(o.get("value"))
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

# lrate FILE: the launches/s launch_heavy printed.
lrate() { grep -ao '[0-9.]* launches/s' "$1" | tail -1 | awk '{print $1}'; }

# med V...: the median of the numbers given, 2 decimals ("nan" for none).
med() { python3 -c "import statistics,sys; v=[float(x) for x in sys.argv[1:] if x]; print(f'{statistics.median(v):.2f}' if v else 'nan')" "$@"; }

# gus FILE ITERS: the median GPU duration in us of the last ITERS vectorAdd
# kernels of a CUPTI trace (the timed loop; the warm-up launch is first).
gus() { [ -s "$1" ] && python3 - "$1" "$2" <<'PY'
import statistics, sys
ks = []
for line in open(sys.argv[1]):
    f = dict(kv.split("=", 1) for kv in line.split(" name=")[0].split())
    if "vectorAdd" in line.split(" name=", 1)[-1]:
        ks.append((int(f["start"]), int(f["end"]) - int(f["start"])))
ks.sort()
d = [x[1] for x in ks[-int(sys.argv[2]):]]
print(f"{statistics.median(d) / 1e3:.3f}" if d else "")
PY
}

# jsum FILE TYPE FIELD [KERNEL]: FIELD summed over FILE's {"type":TYPE}
# lines (only KERNEL's: its "kernel" or "mangled" name); "missing" if none.
jsum() { python3 - "$@" <<'PY'
import json, sys
f, typ, field = sys.argv[1:4]
kernel = sys.argv[4] if len(sys.argv) > 4 else None
s, seen = 0, False
try:
    for line in open(f, errors="replace"):
        try: o = json.loads(line)
        except ValueError: continue
        if not isinstance(o, dict) or o.get("type") != typ: continue
        if kernel and kernel.endswith("*"):
            if not str(o.get("kernel", "")).startswith(kernel[:-1]): continue
        elif kernel and kernel not in (o.get("kernel"), o.get("mangled")): continue
        v = o.get(field)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            s += v; seen = True
except OSError: pass
print(int(s) if seen else "missing")
PY
}
