#!/usr/bin/env bash
# The soak run (docs/soak.md): builds basal-soak and the release worker in build/release, prints
# the machine, then runs 10,000 mixed activations (ordinary work beside log floods, kv
# amplification, CPU, regexp and memory bombs, deadline kills) with random SIGKILLs of workers,
# and checks the accounting and the bounds at the end. Not part of ctest pass/fail; run it before
# resolving a change to the parent's bounds. Exit 1 if a check failed. Extra arguments go to
# basal-soak (--activations N for a quick run, --seed, --mix, --kill-every-ms, --keep-journal).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

build=build/release
if [[ ! -f "$build/CMakeCache.txt" ]]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release
fi
cmake --build "$build" -j2 --target basal-soak ck-basal-worker >/dev/null

# The journal goes to a real file system beside the build (a tmpfs would hide the journal's cost).
work="$build/soak-work"
rm -rf "$work"
mkdir -p "$work"
keep=0
for a in "$@"; do [[ "$a" == --keep-journal ]] && keep=1; done
if ((keep == 0)); then trap 'rm -rf "$work"' EXIT; fi

echo "machine: $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -1), kernel $(uname -r)," \
     "journal on $(df -T "$work" | awk 'NR==2 {print $2}')"
"$build/bin/basal-soak" --journal "$work/journal.db" "$@"
