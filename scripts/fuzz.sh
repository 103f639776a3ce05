#!/usr/bin/env bash
# Builds the libFuzzer targets in fuzz/ with clang-14 (libFuzzer + ASan + UBSan) in build/fuzz and
# runs them one after another (docs/fuzzing.md).
#
#   scripts/fuzz.sh [--smoke] [TARGET...] [-- LIBFUZZER_ARGS...]
#
#   TARGET    frame, worker_message, parent_message, manifest, kv, proc_status, terminal_text, review,
#             http_policy, mcp_message, mcp_downstream, json_schema, http_request
#             (or with _fuzzer); default: all
#   --smoke   a short run of each (BASAL_FUZZ_SMOKE_SECONDS, default 5 s): the CI check
#   default   each runs for BASAL_FUZZ_SECONDS (default 600 s); pass -- -max_total_time=0 to run
#             until a crash or Ctrl-C
#
# Each run starts from the committed seeds (fuzz/corpus/<target>, only read) and the inputs earlier
# runs found (build/fuzz/corpus/<target>, where new ones are written). A crash, an invariant broken,
# a leak, undefined behaviour, a timeout or running out of memory fails the run: the input is saved
# as build/fuzz/artifacts/<target>-crash-<sha1> (or leak-, timeout-, oom-) and this script exits 1.
# Reproduce with: build/fuzz/bin/<target> build/fuzz/artifacts/<target>-crash-<sha1>
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

smoke=0
targets=()
fuzzer_args=()
while (($# > 0)); do
  case "$1" in
    --smoke) smoke=1 ;;
    --) shift; fuzzer_args=("$@"); break ;;
    -h|--help) sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz: unknown option $1 (see --help)" >&2; exit 64 ;;
    *) targets+=("${1%_fuzzer}_fuzzer") ;;
  esac
  shift
done

all=()
for source in fuzz/*_fuzzer.cpp; do all+=("$(basename "$source" .cpp)"); done
if ((${#targets[@]} == 0)); then targets=("${all[@]}"); fi
for t in "${targets[@]}"; do
  if [[ ! -f "fuzz/$t.cpp" ]]; then
    echo "fuzz: no target $t (there are: ${all[*]})" >&2
    exit 64
  fi
done

for tool in clang-14 clang++-14; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "fuzz: $tool is missing; install it with: apt-get install -y clang-14 libclang-rt-14-dev" >&2
    exit 1
  fi
done

# Debug with -O1: assertions stay on (nlohmann's JSON_ASSERT catches misuse such as reading a
# missing key through a const object), and -O1 keeps the fuzzer fast, as libFuzzer's docs advise.
# Line tables only (-gline-tables-only): a report still names file and line, and the build (part
# of CI) takes about a tenth less.
echo "fuzz: building ${targets[*]} in build/fuzz"
mkdir -p build/fuzz
cmake -S . -B build/fuzz -DBASAL_FUZZ=ON -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
  -DCMAKE_C_FLAGS_DEBUG="-gline-tables-only -O1" -DCMAKE_CXX_FLAGS_DEBUG="-gline-tables-only -O1" >build/fuzz/configure.log 2>&1 ||
  { cat build/fuzz/configure.log >&2; exit 1; }
cmake --build build/fuzz -j2 --target "${targets[@]}"

if ((smoke)); then
  seconds="${BASAL_FUZZ_SMOKE_SECONDS:-5}"
else
  seconds="${BASAL_FUZZ_SECONDS:-600}"
fi
mkdir -p build/fuzz/artifacts build/fuzz/logs

failed=()
for t in "${targets[@]}"; do
  mkdir -p "build/fuzz/corpus/$t"
  args=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
        -artifact_prefix="build/fuzz/artifacts/$t-")
  if [[ -f "fuzz/$t.dict" ]]; then args+=(-dict="fuzz/$t.dict"); fi
  log="build/fuzz/logs/$t.log"
  echo "fuzz: $t for ${seconds} s (log: $log)"
  status=0
  "build/fuzz/bin/$t" "${args[@]}" "${fuzzer_args[@]}" "build/fuzz/corpus/$t" "fuzz/corpus/$t" >"$log" 2>&1 ||
    status=$?
  runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)"
  if ((status != 0)); then
    echo "fuzz: $t FAILED (exit $status) after ${runs:-?} runs; the end of its log:" >&2
    tail -n 40 "$log" >&2
    failed+=("$t")
  else
    echo "fuzz: $t ok: ${runs:-?} runs, corpus of $(find "build/fuzz/corpus/$t" -type f | wc -l) inputs found so far"
  fi
done

if ((${#failed[@]} > 0)); then
  echo "fuzz: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: every target ran clean"
