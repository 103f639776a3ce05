#!/usr/bin/env bash
# Quick start, part two: set up and build, then run every test: the release build's suites, and
# the confinement probe suite in the test-hooks build. Exits non-zero if anything failed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

scripts/setup.sh

status=0
echo "test: release build (every label)"
ctest --test-dir build/release --output-on-failure -j2 || status=1

echo "test: test-hooks build (label confinement)"
ctest --test-dir build/hooks -L confinement --output-on-failure || status=1

if ((status != 0)); then
  echo "test: FAILED" >&2
  exit 1
fi
echo "test: all passed"
