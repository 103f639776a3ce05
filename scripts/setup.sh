#!/usr/bin/env bash
# Installs what basal needs on Debian 12 (only what is missing; apt is not touched when nothing
# is), then configures and builds.
#
#   scripts/setup.sh --quick   what running a flow needs (scripts/example.sh, README's quick start):
#                              the build packages, and build/release's basal and ck-basal-worker
#                              (Release; no tests, benchmarks or test-only npm packages)
#   scripts/setup.sh           everything (scripts/test.sh): the test, fuzz and packaging packages too,
#                              then every target of build/release (tests, benchmarks, man pages,
#                              completions) and build/hooks, a test-hooks build (-DBASAL_TEST_HOOKS=ON)
#                              for the confinement probe suite: its worker can be told to weaken
#                              itself, so it is never deployed; and build/mingw, the Windows worker,
#                              its launcher and their tests, cross-built with mingw-w64
#                              (cmake/mingw-w64.cmake), whose tests run under Wine (docs/sandbox.md)
#
# QuickJS is fetched by CMake with `npm pack qjsc@0.3.0` and checked against the pinned integrity.
# BASAL_JOBS: parallel compile jobs (default: the number of cores).
# BASAL_UNITY_BUILD (default ON): the quick start's tree and build/release are unity builds
# (CMakeLists.txt: each target's files compiled in batches; docs/performance.md has what it saves
# from scratch); a tree you edit and rebuild file by file: BASAL_UNITY_BUILD=OFF scripts/setup.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

quick=0
case "${1:-}" in
  --quick) quick=1 ;;
  "") ;;
  *) echo "usage: scripts/setup.sh [--quick]" >&2; exit 2 ;;
esac
jobs="${BASAL_JOBS:-$(nproc)}"
unity="${BASAL_UNITY_BUILD:-ON}"

# What building basal and ck-basal-worker needs. libcurl4-openssl-dev and libidn2-dev: the
# http.fetch policy (src/parent/http/) checks URLs with libcurl's URL API and writes IDN host names
# in punycode with libidn2. basal serve (src/serve/): libcctz-dev and tzdata for cron schedules in
# IANA zones, libmicrohttpd-dev for its HTTP listener, libsystemd-dev for sd_notify. The store on
# PostgreSQL (docs/postgres.md): libpq-dev.
packages=(build-essential cmake pkg-config libseccomp-dev libsqlite3-dev nlohmann-json3-dev libcli11-dev
          libssl-dev libcurl4-openssl-dev libidn2-dev libcctz-dev tzdata libmicrohttpd-dev libsystemd-dev
          libpq-dev)
if ((!quick)); then
  # The tests and benchmarks (GoogleTest, Google Benchmark, strace, python3; curl drives basal
  # serve's end-to-end test); clang-14 and libclang-rt-14-dev (libFuzzer, ASan and UBSan runtimes)
  # build the fuzz targets (scripts/fuzz.sh), whose short run is part of scripts/test.sh. The
  # package's tests (tests/package/, scripts/package-test.sh): man-db and groff-base render the man
  # pages, bash, zsh and fish run the completions, git names the revision, procps has pgrep.
  # g++-mingw-w64-x86-64-posix cross-builds the Windows worker and launcher; wine64 runs them and
  # their tests (headless, in a prefix under build/mingw). postgresql-15: the server the store's
  # PostgreSQL tests start privately (tests/support/pg_cluster.py: initdb + pg_ctl in a temporary
  # directory); util-linux's runuser runs it unprivileged when the tests run as root. chromium: the
  # web console's browser test (tests/console/) drives Debian's headless Chromium. faketime: the
  # clock-skew test of several hosts (tests/serve/clock_skew_test.py) runs a daemon under
  # libfaketime, its clock seconds off the server's.
  packages+=(libgtest-dev libgmock-dev googletest libbenchmark-dev strace clang-14 libclang-rt-14-dev curl python3
             git man-db groff-base zsh fish procps g++-mingw-w64-x86-64-posix wine64 postgresql-15 chromium
             faketime)
fi

missing=()
for p in "${packages[@]}"; do
  if [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)" != "install ok installed" ]]; then
    missing+=("$p")
  fi
done
# node and npm may come from another Debian-format package (nodejs with npm bundled); what CMake
# needs is the two commands.
if ! command -v node >/dev/null 2>&1; then missing+=(nodejs); fi
if ! command -v npm >/dev/null 2>&1; then missing+=(npm); fi

if ((${#missing[@]} > 0)); then
  echo "setup: installing ${missing[*]}"
  sudo=()
  if [[ "$(id -u)" != 0 ]]; then
    if command -v sudo >/dev/null 2>&1; then
      sudo=(sudo)
    else
      echo "setup: need root (or sudo) to install: ${missing[*]}" >&2
      exit 1
    fi
  fi
  # The tests start clusters of their own: Debian's package must not create and start a system-wide
  # "main" cluster on port 5432 (postgresql-common reads createcluster.d before it would).
  if [[ " ${missing[*]} " == *" postgresql-15 "* && ! -e /etc/postgresql-common/createcluster.d/basal-tests.conf ]]; then
    "${sudo[@]}" mkdir -p /etc/postgresql-common/createcluster.d
    echo "create_main_cluster = false" | "${sudo[@]}" tee /etc/postgresql-common/createcluster.d/basal-tests.conf >/dev/null
  fi
  "${sudo[@]}" apt-get update
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
else
  echo "setup: every package is present"
fi

if ((quick)); then
  # A tree configured before (by a full setup) keeps its options: only the two targets are built.
  if [[ ! -f build/release/CMakeCache.txt ]]; then
    echo "setup: configuring build/release (Release; without tests and benchmarks)"
    cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release -DBASAL_BUILD_TESTS=OFF -DBASAL_BUILD_BENCH=OFF \
      -DBASAL_PRECOMPILED_HEADERS=ON -DBASAL_UNITY_BUILD="$unity"
  fi
  echo "setup: building basal and ck-basal-worker in build/release"
  cmake --build build/release -j"$jobs" --target basal_binaries
  exit 0
fi

echo "setup: building build/release"
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release -DBASAL_BUILD_TESTS=ON -DBASAL_BUILD_BENCH=ON \
  -DBASAL_UNITY_BUILD="$unity"
cmake --build build/release -j"$jobs"

echo "setup: building build/hooks (test hooks: tests only, never deployed)"
# File by file still: this tree (BASAL_TEST_HOOKS) has not yet been built as a unity build.
cmake -S . -B build/hooks -DCMAKE_BUILD_TYPE=Release -DBASAL_TEST_HOOKS=ON -DBASAL_BUILD_BENCH=OFF
# Only what the probe suite (ctest -L confinement) runs: its test and the binaries it drives (the
# worker, basal, fake-worker, crash-parent). The other suites run in build/release and build/asan.
cmake --build build/hooks -j"$jobs" --target confinement_probe_test

echo "setup: building build/mingw (the Windows worker, launcher and their tests, cross-built)"
# QuickJS from the tarball the release build fetched and checked; the web globals' bytecode from
# the release build (the same on both systems).
cmake -S . -B build/mingw --toolchain cmake/mingw-w64.cmake -DCMAKE_BUILD_TYPE=Release \
  -DBASAL_HOST_BUILD="$PWD/build/release" -DBASAL_QJSC_TARBALL="$PWD/build/release/_deps/qjsc/qjsc-0.3.0.tgz"
cmake --build build/mingw -j"$jobs"
