#!/usr/bin/env bash
# The soak run (docs/soak.md): builds basal-soak and the release worker in build/release, prints
# the machine, then runs 10,000 mixed activations (ordinary work beside log floods, kv
# amplification, CPU, regexp and memory bombs, deadline kills) with random SIGKILLs of workers,
# and checks the accounting and the bounds at the end. Not part of ctest pass/fail; run it before
# resolving a change to the parent's bounds. Then the daemon phase (scripts/soak-daemon.py): a real
# `basal serve` under API clients, webhook senders, slow and non-reading clients, MCP scripts and
# the hostile flows, its RSS, descriptors and an honest client's latency checked every second.
# Exit 1 if a check of either phase failed. Options of this script:
#   --daemon-seconds N   how long the daemon phase's load runs (default 60; 15 is its quick mode)
#   --daemon-only        only the daemon phase      --no-daemon   only basal-soak
# Other arguments go to basal-soak (--activations N for a quick run, --seed, --mix, --kill-every-ms,
# --keep-journal).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

daemon_seconds=60
phases=both
soak_args=()
while (($#)); do
  case "$1" in
    --daemon-seconds) daemon_seconds="$2"; shift 2 ;;
    --daemon-only) phases=daemon; shift ;;
    --no-daemon) phases=module; shift ;;
    *) soak_args+=("$1"); shift ;;
  esac
done

build=build/release
if [[ ! -f "$build/CMakeCache.txt" ]]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release
fi
cmake --build "$build" -j2 --target basal-soak basal ck-basal-worker >/dev/null

# The journal goes to a real file system beside the build (a tmpfs would hide the journal's cost).
work="$build/soak-work"
rm -rf "$work"
mkdir -p "$work"
keep=0
for a in "${soak_args[@]}"; do [[ "$a" == --keep-journal ]] && keep=1; done
if ((keep == 0)); then trap 'rm -rf "$work"' EXIT; fi

echo "machine: $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -1), kernel $(uname -r)," \
     "journal on $(df -T "$work" | awk 'NR==2 {print $2}')"
status=0
if [[ $phases != daemon ]]; then
  echo "== module phase: basal-soak"
  "$build/bin/basal-soak" --journal "$work/journal.db" "${soak_args[@]}" || status=1
fi
if [[ $phases != module ]]; then
  echo "== daemon phase: basal serve for ${daemon_seconds} s"
  scripts/soak-daemon.py --bin-dir "$build/bin" --seconds "$daemon_seconds" --work-dir "$work" || status=1
fi
exit $status
