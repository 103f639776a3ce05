#!/usr/bin/env bash
# Native traces of the release worker: runs every example flow (examples/*.js with its
# examples/*.manifest.json) through `basal run` under strace, finds in each ck-basal-worker process
# the point where its confinement completes (the seccomp(SECCOMP_SET_MODE_FILTER, ...) = 0 call),
# and checks that every system call the worker makes after it is a row of the seccomp allowlist
# (rendered by basal-policy-dump from the one table in src/confinement/linux/seccomp_policy.cpp).
# Prints a table the docs can quote (docs/syscall-admission.md) and exits non-zero if any system
# call after confinement is outside the allowlist, or if a worker never confined itself.
#
#   scripts/trace-release-worker.sh              uses build/release
#   BASAL_RELEASE_DIR=DIR scripts/trace-release-worker.sh
#   KEEP_TRACES=1 ...                            keeps the raw strace files and prints where
#
# Exit codes: 0 every call admitted; 1 a call outside the allowlist or an unconfined worker;
# 2 a missing tool or binary.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

release_dir=${BASAL_RELEASE_DIR:-build/release}
[[ "$release_dir" == /* ]] || release_dir="$PWD/$release_dir"
worker="$release_dir/bin/ck-basal-worker"
policy_dump="$release_dir/bin/basal-policy-dump"
cli="$release_dir/bin/basal"

die() { echo "trace-release-worker: $*" >&2; exit 2; }

[[ -x "$worker" ]] || die "no release worker at $worker: run scripts/setup.sh (it builds $release_dir)"
[[ -x "$policy_dump" ]] || die "no basal-policy-dump at $policy_dump: run scripts/setup.sh"
# The parent is only the driver here: what is traced and checked is the release worker, which is
# always passed explicitly with --worker.
if [[ ! -x "$cli" ]]; then
  [[ -n "${BASAL_CLI:-}" && -x "${BASAL_CLI}" ]] || die "no basal CLI at $cli (set BASAL_CLI=PATH to drive the release worker with another build's parent)"
  cli=$BASAL_CLI
fi
if ! command -v strace >/dev/null 2>&1; then
  if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "trace-release-worker: installing strace"
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends strace >/dev/null
  else
    die "strace is missing: apt-get install strace"
  fi
fi
if grep -qa -- "__basal_test" "$worker"; then
  echo "trace-release-worker: $worker contains __basal_test: that is a test-hooks build, not a release worker" >&2
  exit 1
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/basal-trace-XXXXXX")
servers=()  # pid files of the example servers started below, stopped at exit
cleanup() {
  local f
  for f in "${servers[@]}"; do [[ -s "$f" ]] && kill "$(cat "$f")" 2>/dev/null || true; done
  if [[ -z "${KEEP_TRACES:-}" ]]; then rm -rf "$work"; fi
}
trap cleanup EXIT

# The allowlist: "name rule" per admitted row, from the "Admitted system calls" table only.
"$policy_dump" markdown | awk '
  /^### / { in_admitted = ($0 ~ /^### Admitted system calls/) ; next }
  in_admitted && /^\| [0-9]+ \| `/ {
    row = $0; gsub(/\\\|/, "\001", row)             # an escaped | inside a cell, e.g. OnlyFd(1\|2)
    split(row, f, "|"); name = f[3]; rule = f[5];
    gsub(/[` ]/, "", name); gsub(/[` ]/, "", rule); gsub(/\001/, "|", rule);
    print name, rule
  }' > "$work/allowlist"
[[ -s "$work/allowlist" ]] || die "could not read the allowlist from $policy_dump markdown"

# One strace per example flow; each trace covers basal and every worker it starts.
flows=()
for js in examples/*.js; do
  base=${js%.js}
  manifest="$base.manifest.json"
  [[ -f "$manifest" ]] || { echo "trace-release-worker: skipping $js: no $manifest" >&2; continue; }
  name=$(basename "$base")
  flows+=("$name")
  # What the flow's page sets up before running it (docs/http.md for orders.js): the example's
  # server (examples/NAME_server.py, on the port of the manifest's first 127.0.0.1 URL) and a
  # throw-away value for each ${secret:NAME} its manifest names, stored beside this trace's journal.
  if [[ -f "${base}_server.py" ]]; then
    port=$(grep -o '127\.0\.0\.1:[0-9]*' "$manifest" | head -1 | cut -d: -f2)
    [[ -n "$port" ]] || die "$manifest names no http://127.0.0.1:PORT URL for ${base}_server.py"
    servers+=("$work/$name.server.pid")
    python3 "${base}_server.py" "$port" "$work/$name.server.pid" ||
      die "${base}_server.py could not listen on 127.0.0.1:$port (is another one running?)"
  fi
  for secret in $(grep -o '\${secret:[A-Za-z0-9_.-]*}' "$manifest" | sed 's/^${secret://; s/}$//' | sort -u); do
    printf '%s\n' "trace-$secret" | "$cli" secret set "$secret" --db "$work/$name.db" >/dev/null
  done
  if [[ -f "$base.jsonl" ]]; then
    input=(--inputs "$base.jsonl")
  else
    input=(--input '{"name":"trace"}')
  fi
  if ! strace -f -qq -e trace=all -o "$work/$name.strace" \
      "$cli" run "$js" --manifest "$manifest" "${input[@]}" --db "$work/$name.db" --worker "$worker" \
      >"$work/$name.out" 2>"$work/$name.err"; then
    echo "trace-release-worker: basal run $js failed:" >&2
    cat "$work/$name.err" >&2
    exit 1
  fi
done
((${#flows[@]} > 0)) || die "no example flows in examples/"

# Per trace: the worker pids (those that execve'd the worker binary), then for each worker every
# system call after its seccomp(SECCOMP_SET_MODE_FILTER, ...) = 0. Output lines:
#   W <flow> <pid> <confined 0|1> <calls before> <calls after>
#   C <flow> <pid> <syscall>            (one per call after confinement)
for name in "${flows[@]}"; do
  awk -v flow="$name" -v worker="$worker" '
    function record(pid, sc) {
      if (!(pid in is_worker)) return
      if (confined[pid]) { after[pid]++; print "C", flow, pid, sc } else { before[pid]++ }
    }
    {
      pid = $1
      line = substr($0, length($1) + 2)
      if (line ~ /^(---|\+\+\+)/) next                 # signals and exits, not system calls
      # An execve of the worker binary makes pid a worker; strace may split it in two lines.
      if (index(line, "execve(\"" worker "\"") == 1) {
        if (line ~ /<unfinished \.\.\.>$/) { exec_pending[pid] = 1; next }
        if (line ~ /= 0$/) { is_worker[pid] = 1; confined[pid] = 0; order[++n] = pid }
        next
      }
      if (line ~ /^<\.\.\. execve resumed>/ && (pid in exec_pending)) {
        delete exec_pending[pid]
        if (line ~ /= 0$/) { is_worker[pid] = 1; confined[pid] = 0; order[++n] = pid }
        next
      }
      if (line ~ /^<\.\.\. /) next                      # the second half of an interrupted call
      if (!match(line, /^[a-z_0-9]+\(/)) next
      sc = substr(line, 1, RLENGTH - 1)
      if (pid in is_worker && !confined[pid] && sc == "seccomp" && line ~ /^seccomp\(SECCOMP_SET_MODE_FILTER/ && line ~ /= 0$/) {
        before[pid]++; confined[pid] = 1; next
      }
      record(pid, sc)
    }
    END { for (i = 1; i <= n; i++) { p = order[i]; print "W", flow, p, confined[p], before[p] + 0, after[p] + 0 } }
  ' "$work/$name.strace"
done > "$work/calls"

# The report.
awk -v nflows="${#flows[@]}" '
  FILENAME == ARGV[1] { rule[$1] = $2; nrows++; next }
  $1 == "W" { workers++; wflow[$2] = wflow[$2] + 1; if ($4 != 1) { unconfined[$2 " pid " $3] = 1; bad = 1 }
              pre += $5; post += $6; next }
  $1 == "C" { count[$4]++; key = $4 SUBSEP $2; if (!(key in seen)) { seen[key] = 1; flows_of[$4] = flows_of[$4] (flows_of[$4] == "" ? "" : ",") $2 } }
  END {
    printf "Release worker traces: %d example flow(s), %d worker process(es), allowlist of %d rows\n", nflows, workers, nrows
    printf "System calls before confinement completed: %d; after: %d\n\n", pre, post
    printf "| system call after confinement | calls | flows | allowlist rule |\n"
    printf "| --- | ---: | --- | --- |\n"
    n = 0
    for (sc in count) names[++n] = sc
    # insertion sort by name: awk has no portable sort
    for (i = 2; i <= n; i++) { v = names[i]; j = i - 1; while (j > 0 && names[j] > v) { names[j + 1] = names[j]; j-- } names[j + 1] = v }
    outside = 0
    for (i = 1; i <= n; i++) {
      sc = names[i]
      if (sc in rule) { r = rule[sc]; gsub(/\|/, "\\|", r); r = "`" r "`" } else { r = "**NOT IN THE ALLOWLIST**"; outside++; bad = 1 }
      printf "| `%s` | %d | %s | %s |\n", sc, count[sc], flows_of[sc], r
    }
    printf "\n"
    for (u in unconfined) printf "FAIL: worker %s never completed seccomp(SECCOMP_SET_MODE_FILTER): no confinement point found\n", u
    if (workers == 0) { print "FAIL: no ck-basal-worker process in the traces"; bad = 1 }
    if (outside > 0) printf "FAIL: %d distinct system call(s) after confinement are outside the allowlist\n", outside
    if (!bad) printf "OK: every one of the %d distinct system calls after confinement is in the allowlist\n", n
    exit bad ? 1 : 0
  }' "$work/allowlist" "$work/calls" || status=$?
status=${status:-0}

# Admitted rows the examples never exercised (expected: the abort, fatal-error and sleep paths).
unused=$(awk 'FILENAME == ARGV[1] { rows[$1] = 1; next } $1 == "C" { used[$4] = 1 }
              END { for (r in rows) if (!(r in used)) print r }' "$work/allowlist" "$work/calls" | sort | paste -sd' ' -)
if [[ -n "$unused" ]]; then echo "Admitted rows not exercised by the example flows: $unused"; fi

if [[ -n "${KEEP_TRACES:-}" ]]; then echo "raw traces kept in $work"; fi
exit "$status"
