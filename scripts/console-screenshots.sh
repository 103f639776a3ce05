#!/usr/bin/env bash
# Regenerates the screenshots docs/console.md shows. The web console's browser test
# (tests/console/console_test.mjs) takes them on every run, against a daemon of its own; this runs
# it and copies them into docs/console/.
#
#   scripts/console-screenshots.sh [BUILD_DIR]    (default build/release, configured with its tests)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build="${1:-build/release}"
cmake --build "$build" -j"${BASAL_JOBS:-2}" --target basal ck-basal-worker
rm -rf "$build/console-screenshots"
ctest --test-dir "$build" -R '^console_browser_test$' --output-on-failure
mkdir -p docs/console
for shot in sign-in runs run run-durable flow schedules health; do
  cp "$build/console-screenshots/$shot.png" docs/console/
done
echo "console-screenshots: docs/console/ updated from $build/console-screenshots/"
