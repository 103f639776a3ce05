#!/usr/bin/env bash
# Runs every benchmark: builds build/release if needed, prints the machine, then basal-bench's
# figures beside the references measured in the same run. Not part of ctest pass/fail: a missed
# target is printed as MISSED, never an error. Extra arguments go to basal-bench (--quick, --only).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

build=build/release
if [[ ! -f "$build/CMakeCache.txt" ]]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release
fi
cmake --build "$build" -j2 --target basal-bench >/dev/null

work="$build/bench-work"
rm -rf "$work"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT

echo "machine: $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -1), kernel $(uname -r)," \
     "journal on $(df -T "$work" | awk 'NR==2 {print $2}'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
"$build/bin/basal-bench" --work-dir "$work" "$@"
