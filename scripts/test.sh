#!/usr/bin/env bash
# Quick start, part two: set up and build, then run every test: the release build's suites, the
# confinement probe suite in the test-hooks build, the Windows cross build's tests under Wine, the
# Debian package built, installed, used and removed (scripts/package-test.sh, as root), the unit and
# integration suites again in the asan build (ASan and UBSan in the parent, the CLI and the tests),
# and a short run of each fuzz target (docs/fuzzing.md). Exits non-zero if anything failed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Each stage's wall time is printed as it ends ("test: took N s: STAGE"), so a slow CI run shows
# where its time went.
stage_name="setup (packages and builds)"
stage_start=$SECONDS
stage() {
  echo "test: took $((SECONDS - stage_start)) s: $stage_name"
  stage_name="$1"
  stage_start=$SECONDS
}

scripts/setup.sh

status=0
stage "release build (every label)"
echo "test: release build (every label)"
ctest --test-dir build/release --output-on-failure -j2 || status=1

stage "test-hooks build (label confinement)"
echo "test: test-hooks build (label confinement)"
ctest --test-dir build/hooks -L confinement --output-on-failure || status=1

stage "Windows cross build under Wine"
echo "test: Windows cross build under Wine (labels unit and wine)"
ctest --test-dir build/mingw --output-on-failure || status=1

stage "the Debian package"
echo "test: the Debian package (build, install, use, remove: scripts/package-test.sh)"
if [[ "$(id -u)" != 0 ]]; then
  echo "test: package: skipped: installing a package needs root (CI runs as root; or: sudo scripts/package-test.sh)"
elif [[ "$(dpkg-query -W -f='${Status}' basal 2>/dev/null || true)" == *installed* ]]; then
  echo "test: package: skipped: basal is installed on this machine, and the test would replace it"
else
  scripts/package-test.sh build/release || status=1
fi

stage "fuzz targets, a short run of each"
echo "test: fuzz targets, a short run of each (libFuzzer, ASan, UBSan)"
scripts/fuzz.sh --smoke || status=1

stage "asan build and its suites"
echo "test: asan build (labels unit and integration)"
# A unity build (BASAL_UNITY_BUILD): built from nothing, as CI does, a batch costs nothing extra.
# It was built to the end with -O1 and the sanitizers, without a warning, and its unit and
# integration labels passed (docs/performance.md, "Unity build"). A developer's own asan tree,
# configured by `cmake --preset asan` alone, stays file by file.
if cmake --preset asan -DBASAL_UNITY_BUILD=ON >build/asan.configure.log 2>&1 && cmake --build --preset asan -j2; then
  # Two tests run in the release build only. parked_scale_test (10,000 parked runs): under ASan it
  # adds a minute and a half of CI for the same code paths parked_test covers with a few runs.
  # clock_skew_test: it waits for a real cron minute (about 90 s) and preloads libfaketime into the
  # daemons, which ASan's runtime wants loaded first; multihost_test runs the same lease and
  # schedule paths under ASan.
  ctest --test-dir build/asan -L 'unit|integration' -E '^(parked_scale_test|clock_skew_test)$' --output-on-failure -j2 || status=1
else
  cat build/asan.configure.log >&2
  echo "test: the asan build failed" >&2
  status=1
fi

stage "end"
echo "test: took $SECONDS s in all"
if ((status != 0)); then
  echo "test: FAILED" >&2
  exit 1
fi
echo "test: all passed"
