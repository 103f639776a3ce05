#!/usr/bin/env bash
# Runs every benchmark: builds build/release if needed, prints the machine, then runs basal-bench's
# figures beside the references measured in the same run, in several interleaved rounds (round 1 of
# every figure, then round 2, ...: load that drifts during the session hits every figure alike), and
# prints per figure the median over rounds and its spread (min..max), with the load average at the
# start and the end. --compare REV builds REV in a temporary git worktree and runs both builds'
# basal-bench in the same session, alternating within each round, side by side. Not part of ctest
# pass/fail: a missed target is printed as MISSED, never an error.
#
#   scripts/bench.sh [--rounds N] [--compare REV] [--quick] [--only FIGURE] [--postgres] [--plan]
#   scripts/bench.sh --only burndown [--runs N] [--rounds N]
#
# --postgres journals on PostgreSQL instead of SQLite: each round's basal-bench runs inside a new
# private cluster (tests/support/pg_cluster.py, with fsync, full_page_writes and synchronous_commit
# on, as a server runs) and writes the references' commits and every figure that journals (all but
# the durable figure and the cold start) to its database (basal-bench --journal). With --compare,
# REV must know --journal for the figures too (this commit's basal-bench and later).
#
# --only burndown is the burn-down benchmark (bench/burndown.py, docs/performance.md): N runs
# (20,000 unless --runs says) queued, then worked off by 1 host on SQLite, 1 host and 2 hosts on
# PostgreSQL (a private cluster), with each store's commit latency; one round unless --rounds says.
#
# --plan prints what would be built and run, in order, and exits (no build, no run): how the
# argument handling is tested (tests/bench/bench_summary_test.py).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

usage() {
  echo "usage: scripts/bench.sh [--rounds N] [--compare REV] [--quick] [--only FIGURE] [--postgres] [--plan] [--runs N (burndown)]" >&2
  exit 64
}

rounds=3
rounds_given=0
runs=20000
only=""
compare=""
plan=0
postgres=0
bench_args=()
while (($#)); do
  case "$1" in
    --rounds)
      (($# >= 2)) || { echo "bench.sh: --rounds needs a number" >&2; usage; }
      [[ "$2" =~ ^[1-9][0-9]*$ ]] || { echo "bench.sh: --rounds takes a whole number from 1, not '$2'" >&2; exit 64; }
      rounds=$2
      rounds_given=1
      shift 2
      ;;
    --compare)
      (($# >= 2)) || { echo "bench.sh: --compare needs a revision" >&2; usage; }
      compare=$2
      shift 2
      ;;
    --only)
      (($# >= 2)) || { echo "bench.sh: --only needs a figure (hostcall, warm, cold, throughput, memory, fetch, serve, mcp, durable, commit, burndown)" >&2; usage; }
      bench_args+=(--only "$2")
      only=$2
      shift 2
      ;;
    --runs)
      (($# >= 2)) || { echo "bench.sh: --runs needs a number" >&2; usage; }
      [[ "$2" =~ ^[1-9][0-9]*$ ]] || { echo "bench.sh: --runs takes a whole number from 1, not '$2'" >&2; exit 64; }
      runs=$2
      shift 2
      ;;
    --quick)
      bench_args+=(--quick)
      shift
      ;;
    --plan)
      plan=1
      shift
      ;;
    --postgres)
      postgres=1
      shift
      ;;
    -h | --help)
      usage
      ;;
    *)
      echo "bench.sh: unknown argument '$1'" >&2
      usage
      ;;
  esac
done

build=build/release

if [[ "$only" == burndown ]]; then
  [[ -z "$compare" ]] || { echo "bench.sh: --only burndown does not take --compare" >&2; exit 64; }
  ((!postgres)) || { echo "bench.sh: --only burndown runs on both stores already; it does not take --postgres" >&2; exit 64; }
  ((rounds_given)) || rounds=1
  if ((plan)); then
    echo "build: $build (basal, ck-basal-worker, basal-bench)"
    for ((r = 1; r <= rounds; r++)); do echo "round $r/$rounds: bench/burndown.py --runs $runs"; done
    exit 0
  fi
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(dirname "$PWD")}"
  [[ -f "$build/CMakeCache.txt" ]] || cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release
  cmake --build "$build" -j2 --target basal ck-basal-worker basal-bench >/dev/null
  echo "machine: $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(free -g | awk '/^Mem:/ {print $2}') GiB," \
       "kernel $(uname -r), $(df -T "${TMPDIR:-/tmp}" | awk 'NR==2 {print $2}') under ${TMPDIR:-/tmp}"
  echo "this: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . 2>/dev/null || echo ' (with uncommitted changes)')"
  for ((r = 1; r <= rounds; r++)); do
    echo "round $r/$rounds (load average $(cut -d' ' -f1-3 /proc/loadavg))"
    python3 bench/burndown.py --bin-dir "$build/bin" --runs "$runs"
  done
  exit 0
fi
# The builds run in this order within each round; odd rounds run them as listed, even rounds the
# other way round, so neither build always runs first (after the other one warmed the caches).
labels=(this)
if [[ -n "$compare" ]]; then
  labels+=("$compare")
fi

if ((plan)); then
  echo "build: $build (basal-bench)"
  [[ -n "$compare" ]] && echo "build: $compare in a temporary worktree (basal-bench)"
  for ((r = 1; r <= rounds; r++)); do
    order=("${labels[@]}")
    if ((${#labels[@]} == 2 && r % 2 == 0)); then order=("${labels[1]}" "${labels[0]}"); fi
    for l in "${order[@]}"; do
      echo "round $r/$rounds: $l basal-bench${bench_args[*]:+ ${bench_args[*]}}$( ((postgres)) && echo " --journal (a new private PostgreSQL cluster)")"
    done
  done
  exit 0
fi

export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(dirname "$PWD")}"
if [[ ! -f "$build/CMakeCache.txt" ]]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release
fi
cmake --build "$build" -j2 --target basal-bench >/dev/null

work="$build/bench-work"
results="$build/bench-results/$(date -u +%Y%m%dT%H%M%SZ)"
rm -rf "$work"
mkdir -p "$work" "$results/this"
compare_tree=""
cleanup() {
  rm -rf "$work"
  if [[ -n "$compare_tree" ]]; then
    git worktree remove --force "$compare_tree" >/dev/null 2>&1 || rm -rf "$compare_tree"
    git worktree prune
  fi
}
trap cleanup EXIT

declare -A bench_bin=([this]="$build/bin/basal-bench")
if [[ -n "$compare" ]]; then
  rev=$(git rev-parse --verify --quiet "$compare^{commit}") || { echo "bench.sh: '$compare' is not a revision here" >&2; exit 64; }
  compare_tree=$(mktemp -d "$PWD/build/bench-compare.XXXXXX")
  rmdir "$compare_tree"
  git worktree add --detach "$compare_tree" "$rev" >/dev/null 2>&1
  # Configured as this checkout's build is: the same unity setting (a unity build inlines across
  # the sources of a batch, so the two builds would otherwise not be the same compile) and the same
  # compiler launcher (from the environment, else this build's cache, else ccache when installed).
  # The same layout as this checkout (build/release under the tree), so ccache's base-relative
  # paths match and the unchanged sources are cache hits.
  cache_value() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt" | head -n 1; }
  unity=$(cache_value BASAL_UNITY_BUILD)
  cxx_launcher=${CMAKE_CXX_COMPILER_LAUNCHER:-$(cache_value CMAKE_CXX_COMPILER_LAUNCHER)}
  c_launcher=${CMAKE_C_COMPILER_LAUNCHER:-$(cache_value CMAKE_C_COMPILER_LAUNCHER)}
  if [[ -z "$cxx_launcher" && -z "$c_launcher" ]] && command -v ccache >/dev/null; then
    cxx_launcher=ccache c_launcher=ccache
  fi
  echo "building $compare ($(git rev-parse --short "$rev")) in $compare_tree (unity build: ${unity:-OFF}; compiler launcher: ${cxx_launcher:-none})"
  (cd "$compare_tree" && cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release -DBASAL_UNITY_BUILD="${unity:-OFF}" \
     ${cxx_launcher:+-DCMAKE_CXX_COMPILER_LAUNCHER="$cxx_launcher"} \
     ${c_launcher:+-DCMAKE_C_COMPILER_LAUNCHER="$c_launcher"} >/dev/null &&
     cmake --build build/release -j2 --target basal-bench >/dev/null)
  bench_bin[$compare]="$compare_tree/build/release/bin/basal-bench"
  mkdir -p "$results/compare"
fi

load_start=$(cut -d' ' -f1-3 /proc/loadavg)
if ((postgres)); then
  store="PostgreSQL (a private cluster in ${TMPDIR:-/tmp}, on $(df -T "${TMPDIR:-/tmp}" | awk 'NR==2 {print $2}'))"
else
  store="SQLite on $(df -T "$work" | awk 'NR==2 {print $2}')"
fi
echo "machine: $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -1), kernel $(uname -r)," \
     "journal on $store, load average $load_start"
echo "this: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . 2>/dev/null || echo ' (with uncommitted changes)')${compare:+; compare: $compare ($(git rev-parse --short "$rev"))}"
echo "$rounds round(s), raw output in $results"

for ((r = 1; r <= rounds; r++)); do
  order=("${labels[@]}")
  if ((${#labels[@]} == 2 && r % 2 == 0)); then order=("${labels[1]}" "${labels[0]}"); fi
  for l in "${order[@]}"; do
    dir="$results/this"
    [[ "$l" == this ]] || dir="$results/compare"
    echo "round $r/$rounds: $l (load average $(cut -d' ' -f1-3 /proc/loadavg))"
    rm -rf "$work" && mkdir -p "$work"
    run=("${bench_bin[$l]}" --work-dir "$work" "${bench_args[@]}")
    if ((postgres)); then
      # The locator is the cluster's (BASAL_TEST_PG), known only inside it.
      run=(python3 tests/support/pg_cluster.py --set fsync=on --set full_page_writes=on --set synchronous_commit=on
           --set shared_buffers=128MB -- sh -c 'exec "$@" --journal "$BASAL_TEST_PG"' sh "${run[@]}")
    fi
    "${run[@]}" >"$dir/round-$r.txt" 2>&1 ||
      { echo "bench.sh: basal-bench ($l) failed in round $r:" >&2; tail -20 "$dir/round-$r.txt" >&2; exit 1; }
  done
done
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

if ((rounds == 1)) && [[ -z "$compare" ]]; then
  cat "$results/this/round-1.txt"
fi
summary=(python3 scripts/bench_summary.py --load-start "$load_start" --load-end "$load_end" --label "this=$results/this")
[[ -n "$compare" ]] && summary+=(--label "$compare=$results/compare")
"${summary[@]}" | tee "$results/summary.txt"
