#!/usr/bin/env bash
# Never a weaker sandbox, under Wine (docs/sandbox.md, "What Wine shows"). Wine runs the
# cross-built launcher and worker, but it cannot make a real LPAC token, so:
#   1. the launcher refuses to start the worker, naming the step, and exits 70; nothing reaches its
#      stdout (no welcome, nothing of the flow it was given);
#   2. the worker started bare (as anything but the launcher would start it) refuses itself: exit
#      70, `confinement failed: <step>: <reason>` on stderr, no welcome, its stdin unread;
#   3. a Linux parent (basal run) given either as its worker counts a confinement refusal, fails
#      the activation as worker_refused, and journals no host call: the flow never ran;
#   4. the Linux parent's Welcome rule would refuse a Windows welcome anyway (os "windows" on a
#      Linux parent): shown by the unit tests (platform_rules_test) and by fake-worker in the
#      integration suite.
# Each step's unconfined control: the same flow through the Linux worker runs and logs its marker,
# so the marker's absence above is the refusal's doing, not a broken flow.
#   wine_refusal_test.sh LAUNCH.exe WORKER.exe BASAL
set -euo pipefail
launch="$1" worker="$2" basal="$3"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${WINEPREFIX:?WINEPREFIX must name the prefix (tests/windows/wine_prefix.sh makes it)}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "wine_refusal: FAIL: $*" >&2; exit 1; }
winpath() { printf 'Z:%s' "${1//\//\\}"; }

# A flow whose every effect would show: a log line (journaled, printed with --logs) and a result.
cat >"$tmp/flow.js" <<'JS'
export default async function (input) {
  console.log("FLOW RAN " + JSON.stringify(input));
  return "FLOW RAN";
}
JS
echo '{"grants": {}, "budgets": {"cpu_ms": 1000, "heap_mb": 16, "stack_kb": 512, "deadline_ms": 20000}}' >"$tmp/flow.manifest.json"
# The frames a parent would send: load, then activate (4-byte little-endian length, JSON).
python3 - "$tmp/flow.js" >"$tmp/frames.bin" <<'PY'
import json, struct, sys
src = open(sys.argv[1]).read()
for m in ({"type": "load", "flow": "flow.js", "source": src, "profile": "flow", "cpu_ms": 1000,
           "heap_bytes": 16 << 20, "stack_bytes": 512 << 10},
          {"type": "activate", "activation": 1, "input": {"x": 1}}):
    b = json.dumps(m).encode()
    sys.stdout.buffer.write(struct.pack("<I", len(b)) + b)
PY

# ---- 1. the launcher refuses ----
start=$(date +%s%N)
set +e
"$here/wine.sh" "$launch" --worker "$(winpath "$worker")" <"$tmp/frames.bin" >"$tmp/launch.out" 2>"$tmp/launch.err"
status=$?
set -e
elapsed=$(( ($(date +%s%N) - start) / 1000000 ))
echo "launcher under Wine: exit $status in $elapsed ms: $(head -c 600 "$tmp/launch.err")"
[[ $status == 70 ]] || fail "the launcher exited $status, not 70 (refused)"
grep -q '^ck-basal-launch: worker launch refused: [a-z ]*: ' "$tmp/launch.err" || fail "the launcher's refusal names no step"
[[ ! -s "$tmp/launch.out" ]] || fail "the launcher wrote to its stdout: $(head -c 200 "$tmp/launch.out" | od -c | head -3)"

# ---- 1b. the same with Wine reporting Windows 10 to the launcher: Wine itself is named ----
# (AppDefaults: only ck-basal-launch.exe is told so, and only for this step.)
key='HKCU\Software\Wine\AppDefaults\ck-basal-launch.exe'
"$here/wine.sh" reg.exe add "$key" /v Version /t REG_SZ /d win10 /f >/dev/null 2>&1
set +e
"$here/wine.sh" "$launch" --worker "$(winpath "$worker")" <"$tmp/frames.bin" >"$tmp/launch10.out" 2>"$tmp/launch10.err"
status=$?
set -e
"$here/wine.sh" reg.exe delete "$key" /f >/dev/null 2>&1
echo "launcher under Wine reporting Windows 10: exit $status: $(head -c 600 "$tmp/launch10.err")"
[[ $status == 70 ]] || fail "the launcher (Windows 10 reported) exited $status, not 70 (refused)"
grep -q '^ck-basal-launch: worker launch refused: system: this is Wine ' "$tmp/launch10.err" || fail "the launcher did not name Wine"
[[ ! -s "$tmp/launch10.out" ]] || fail "the launcher (Windows 10 reported) wrote to its stdout"

# ---- 2. the worker, started bare, refuses itself ----
start=$(date +%s%N)
set +e
"$here/wine.sh" "$worker" <"$tmp/frames.bin" >"$tmp/worker.out" 2>"$tmp/worker.err"
status=$?
set -e
elapsed=$(( ($(date +%s%N) - start) / 1000000 ))
echo "bare worker under Wine: exit $status in $elapsed ms: $(head -c 600 "$tmp/worker.err")"
[[ $status == 70 ]] || fail "the bare worker exited $status, not 70 (confinement failed)"
grep -q '^ck-basal-worker: confinement failed: [a-z ]*: ' "$tmp/worker.err" || fail "the worker's refusal names no check"
[[ ! -s "$tmp/worker.out" ]] || fail "the bare worker wrote to its stdout (a welcome?): $(head -c 200 "$tmp/worker.out" | od -c | head -3)"

# ---- 3. a Linux parent, given either ----
for how in launcher bare; do
  wrapper="$tmp/worker-$how.sh"
  {
    echo '#!/bin/bash'
    echo '# The Linux parent starts this with its own argv (--parent-pid ...) and an empty environment.'
    echo "export PATH=/usr/bin:/bin WINEPREFIX='$WINEPREFIX'"
    if [[ $how == launcher ]]; then
      echo "exec '$here/wine.sh' '$launch' --worker '$(winpath "$worker")'"
    else
      echo "exec '$here/wine.sh' '$worker'"
    fi
  } >"$wrapper"
  chmod +x "$wrapper"
  set +e
  "$basal" run "$tmp/flow.js" --manifest "$tmp/flow.manifest.json" --input '{"x":1}' --logs --db "$tmp/$how.db" \
    --worker "$wrapper" --health-out "$tmp/$how.health.json" >"$tmp/$how.run.out" 2>"$tmp/$how.run.err"
  status=$?
  set -e
  echo "basal run with the Windows worker ($how): exit $status: $(head -c 400 "$tmp/$how.run.err")"
  # 3: basal could not run the flow as it must (docs/cli.md), the exit of worker_refused.
  [[ $status == 3 ]] || fail "basal run ($how) exited $status, not 3 (worker_refused)"
  grep -q 'worker_refused' "$tmp/$how.run.out" "$tmp/$how.run.err" || fail "basal run ($how): the activation did not fail as worker_refused"
  ! grep -q 'FLOW RAN' "$tmp/$how.run.out" "$tmp/$how.run.err" || fail "basal run ($how): the flow ran"
  python3 - "$tmp/$how.health.json" <<'PY' || fail "basal run ($how): health does not show one confinement refusal"
import json, sys
h = json.load(open(sys.argv[1]))
assert h["confinement_refusals"] == 1, h["confinement_refusals"]
assert h["refused_welcomes"] == 0 and h["fatal_status_deaths"] == 0 and h["worker_confinement"] == 0, h
assert h["activations"]["ok"] == 0 and h["activations"]["failed_by_kind"] == {"worker_refused": 1}, h["activations"]
PY
  "$basal" journal --db "$tmp/$how.db" --json >"$tmp/$how.journal.json"
  python3 - "$tmp/$how.journal.json" <<'PY' || fail "basal run ($how): the journal holds a host call"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
assert len(rows) == 1, rows
assert rows[0]["calls"] == [], rows[0]["calls"]
PY
done

# ---- the control: the same flow, the same parent, the Linux worker ----
"$basal" run "$tmp/flow.js" --manifest "$tmp/flow.manifest.json" --input '{"x":1}' --logs --db "$tmp/control.db" \
  >"$tmp/control.out" 2>"$tmp/control.err" || fail "the control run failed: $(cat "$tmp/control.err")"
grep -q 'FLOW RAN' "$tmp/control.out" "$tmp/control.err" || fail "the control run did not show the flow's marker"
echo "wine_refusal: every refusal held; the control ran the flow"
