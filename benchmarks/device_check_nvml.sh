#!/usr/bin/env bash
# The NVML paths of gpumem against a real NVIDIA GPU: snapshot (JSON, sampling), the agent's
# /metrics and /snapshot, and NVML's used memory against nvidia-smi's. Prints PASS/FAIL lines;
# exit status is the number of FAILs. Writes what it saw to "$OUT" when set. About 30 s.
#
#   bash benchmarks/device_check_nvml.sh              # from the repository root
#   OUT=/tmp/nvml-check bash benchmarks/device_check_nvml.sh
#
# Python: $PYTHON if set, else .venv/bin/python if it works here, else python3. The project is
# installed into a throw-away venv that sees that Python's packages (no network needed: it
# needs nvidia-ml-py, prometheus-client and PyYAML already there); if that install fails, the
# checks run the same code from the source tree through PYTHONPATH.
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-$(mktemp -d)}"
mkdir -p "$OUT"
TOL_MIB="${TOL_MIB:-8}"
PORT="${PORT:-19500}"
fails=0

pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  if .venv/bin/python -c 'import pynvml, prometheus_client, yaml' 2>/dev/null; then PY=.venv/bin/python; else PY=python3; fi
fi
export PYTHONUNBUFFERED=1
WORK="$(mktemp -d)"
SITE="$WORK/site"
# A copy to build from keeps build/ and *.egg-info out of the checkout. --target, not a venv:
# a venv made from a venv's python would not see that venv's packages.
mkdir -p "$WORK/src" && cp -r pyproject.toml README.md bot collectors runbooks "$WORK/src/"
if "$PY" -m pip install -q --no-deps --no-index --no-build-isolation --target "$SITE" "$WORK/src" > "$OUT/install.log" 2>&1 \
   && [ -x "$SITE/bin/gpumem" ]; then
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
  GPUMEM=("$SITE/bin/gpumem")
  pass "pip install . into $SITE (the gpumem entry point, locales as package data)"
else
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
  GPUMEM=("$PY" -m bot)
  echo "NOTE pip install failed (see $OUT/install.log); running from the source tree"
fi

echo "python: $($PY -c 'import sys; print(sys.version.split()[0], sys.executable)')"
if "$PY" -c 'import pynvml, prometheus_client, yaml' 2>"$OUT/imports.err"; then
  pass "imports: pynvml $("$PY" -c 'from importlib.metadata import version; print(version("nvidia-ml-py"))' 2>/dev/null)"
else
  fail "imports: $(tail -1 "$OUT/imports.err")"; exit "$fails"
fi
if ! command -v nvidia-smi > /dev/null; then
  fail "nvidia-smi not found: not a GPU machine"
fi
nvidia-smi -L 2>&1 | tee "$OUT/nvidia-smi-L.txt"
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1

# 1. one sample as JSON
if "${GPUMEM[@]}" snapshot --format json --lang en > "$OUT/snapshot.json" 2> "$OUT/snapshot.err"; then
  pass "snapshot --format json: $("$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(len(d), "sample(s),", len(d[0]["devices"]), "device(s)")' "$OUT/snapshot.json")"
else
  fail "snapshot --format json exited $?: $(cat "$OUT/snapshot.err")"
fi

# 2. three samples a second apart, as text and CSV
start=$(date +%s%N)
if "${GPUMEM[@]}" snapshot --count 3 --interval 1 --lang en > "$OUT/snapshot-3.txt" 2>&1; then
  took_ms=$((($(date +%s%N) - start) / 1000000))
  pass "snapshot --count 3 --interval 1 (text) in ${took_ms} ms (two 1 s waits and the start-up)"
  cat "$OUT/snapshot-3.txt"
else
  fail "snapshot --count 3 --interval 1: $(tail -3 "$OUT/snapshot-3.txt")"
fi
if "${GPUMEM[@]}" snapshot --count 3 --interval 1 --format csv > "$OUT/snapshot-3.csv" 2>&1 \
   && [ "$(wc -l < "$OUT/snapshot-3.csv")" -ge 4 ]; then
  pass "snapshot --count 3 --format csv: $(($(wc -l < "$OUT/snapshot-3.csv") - 1)) rows"
else
  fail "snapshot --count 3 --format csv: $(tail -3 "$OUT/snapshot-3.csv")"
fi

# 3. NVML against nvidia-smi (same instant as closely as two processes allow)
nvidia-smi --query-gpu=index,memory.used,memory.total --format=csv,noheader,nounits > "$OUT/smi-query.csv" 2>&1
"${GPUMEM[@]}" snapshot --format json > "$OUT/snapshot-compare.json" 2>/dev/null
"$PY" - "$OUT/smi-query.csv" "$OUT/snapshot-compare.json" "$TOL_MIB" <<'EOF' || fails=$((fails + 1))
import json, sys
smi_path, snap_path, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
smi = {}
for line in open(smi_path):
    cells = [c.strip() for c in line.split(",")]
    if len(cells) == 3 and cells[0].isdigit():
        smi[cells[0]] = (cells[1], cells[2])
try:
    devices = json.load(open(snap_path))[0]["devices"]
except (OSError, ValueError, LookupError) as e:
    print(f"FAIL nvml vs nvidia-smi: no NVML snapshot to compare ({e})")
    sys.exit(1)
if not smi:
    print("FAIL nvml vs nvidia-smi: nvidia-smi printed no readings")
    sys.exit(1)
bad = 0
for d in devices:
    gpu = d["index"].split(":")[0]
    if ":" in d["index"]:
        print(f"SKIP gpu {d['index']}: MIG slice (nvidia-smi --query-gpu reports the whole card)")
        continue
    used_smi, total_smi = smi.get(gpu, ("?", "?"))
    if not used_smi.isdigit() or d["used_bytes"] is None:
        print(f"FAIL gpu {gpu}: nvidia-smi used={used_smi!r}, nvml used={d['used_bytes']}"); bad += 1; continue
    used_nvml = d["used_bytes"] / 2**20
    diff = abs(used_nvml - int(used_smi))
    reserved = (d["reserved_bytes"] or 0) / 2**20
    verdict = "PASS" if diff <= tol else "FAIL"
    bad += verdict == "FAIL"
    print(f"{verdict} gpu {gpu} used: nvml {used_nvml:.1f} MiB vs nvidia-smi {used_smi} MiB (diff {diff:.1f}, "
          f"tolerance {tol:g}); reserved {reserved:.0f} MiB; total nvml {d['total_bytes'] / 2**20:.0f} vs smi {total_smi}")
sys.exit(1 if bad else 0)
EOF

# 4. the agent on loopback
"${GPUMEM[@]}" agent --host 127.0.0.1 --port "$PORT" --interval 2 --lang en 2> "$OUT/agent.err" &
agent=$!
for _ in $(seq 50); do curl -fs "http://127.0.0.1:$PORT/healthz" > /dev/null 2>&1 && break; sleep 0.1; done
code=$(curl -s -o "$OUT/healthz.txt" -w '%{http_code}' "http://127.0.0.1:$PORT/healthz")
[ "$code" = 200 ] && pass "agent /healthz 200" || fail "agent /healthz $code: $(cat "$OUT/healthz.txt")"
curl -s "http://127.0.0.1:$PORT/metrics" > "$OUT/metrics.txt"
if grep -q '^gpumem_nvml_up 1' "$OUT/metrics.txt" && grep -q '^gpumem_gpu_memory_used_bytes{' "$OUT/metrics.txt"; then
  pass "agent /metrics: $(grep -c '^gpumem_' "$OUT/metrics.txt") gpumem samples"
  grep '^gpumem_gpu_memory_used_bytes\|^gpumem_gpu_process' "$OUT/metrics.txt"
else
  fail "agent /metrics: $(head -c 400 "$OUT/metrics.txt")"
fi
curl -s "http://127.0.0.1:$PORT/snapshot" > "$OUT/agent-snapshot.json"
if "$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["devices"] and d["source"] == "nvml"' "$OUT/agent-snapshot.json" 2>/dev/null; then
  pass "agent /snapshot JSON with devices"
else
  fail "agent /snapshot: $(head -c 400 "$OUT/agent-snapshot.json")"
fi
kill -TERM "$agent"
if wait "$agent"; then pass "agent stopped on SIGTERM with exit 0"; else fail "agent exit $? after SIGTERM"; fi
cat "$OUT/agent.err"

echo "outputs in $OUT"
[ "$fails" -eq 0 ] && echo "ALL PASS" || echo "$fails FAIL(s)"
exit "$fails"
