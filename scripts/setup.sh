#!/usr/bin/env bash
# Installs what basal needs on Debian 12 (only what is missing; apt is not touched when nothing
# is), then configures and builds:
#   build/release  the release build (what you deploy; examples run from here)
#   build/hooks    a test-hooks build (-DBASAL_TEST_HOOKS=ON) for the confinement probe suite:
#                  its worker can be told to weaken itself, so it is never deployed
#   build/mingw    the Windows worker, its launcher and their tests, cross-built with mingw-w64
#                  (cmake/mingw-w64.cmake); its tests run under Wine (docs/sandbox.md)
# QuickJS is fetched by CMake with `npm pack qjsc@0.3.0` and checked against the pinned integrity.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# clang-14 and libclang-rt-14-dev (libFuzzer, ASan and UBSan runtimes) build the fuzz targets
# (scripts/fuzz.sh), whose short run is part of scripts/test.sh. libcurl4-openssl-dev and libidn2-dev:
# the http.fetch policy (src/parent/http/) checks URLs with libcurl's URL API and writes IDN host
# names in punycode with libidn2. basal serve (src/serve/): libcctz-dev and tzdata for cron schedules in
# IANA zones, libmicrohttpd-dev for its HTTP listener, libsystemd-dev for sd_notify; curl drives its
# end-to-end test (tests/serve/). g++-mingw-w64-x86-64-posix cross-builds the Windows worker and
# launcher; wine64 runs them and their tests (headless, in a prefix under build/mingw).
packages=(build-essential cmake pkg-config libseccomp-dev libsqlite3-dev nlohmann-json3-dev libcli11-dev
          libgtest-dev libgmock-dev googletest libbenchmark-dev strace libssl-dev clang-14 libclang-rt-14-dev
          libcurl4-openssl-dev libidn2-dev libcctz-dev tzdata libmicrohttpd-dev libsystemd-dev curl
          g++-mingw-w64-x86-64-posix wine64)

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
  "${sudo[@]}" apt-get update
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
else
  echo "setup: every package is present"
fi

echo "setup: building build/release"
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release
cmake --build build/release -j2

echo "setup: building build/hooks (test hooks: tests only, never deployed)"
cmake -S . -B build/hooks -DCMAKE_BUILD_TYPE=Release -DBASAL_TEST_HOOKS=ON -DBASAL_BUILD_BENCH=OFF
# Only what the probe suite (ctest -L confinement) runs: its test and the binaries it drives (the
# worker, basal, fake-worker, crash-parent). The other suites run in build/release and build/asan.
cmake --build build/hooks -j2 --target confinement_probe_test

echo "setup: building build/mingw (the Windows worker, launcher and their tests, cross-built)"
# QuickJS from the tarball the release build fetched and checked; the web globals' bytecode from
# the release build (the same on both systems).
cmake -S . -B build/mingw --toolchain cmake/mingw-w64.cmake -DCMAKE_BUILD_TYPE=Release \
  -DBASAL_HOST_BUILD="$PWD/build/release" -DBASAL_QJSC_TARBALL="$PWD/build/release/_deps/qjsc/qjsc-0.3.0.tgz"
cmake --build build/mingw -j2
