#!/usr/bin/env bash
# The release worker must contain no test hooks (issue 3, point 5): no __basal_test object in its
# engine and no switch that weakens or skips a layer of its confinement. A test-hooks worker fails.
#
#   tests/confinement/no_test_hooks_in_release.sh build/release/bin/ck-basal-worker
set -euo pipefail
worker=${1:?usage: no_test_hooks_in_release.sh PATH-TO-ck-basal-worker}
[[ -x "$worker" ]] || { echo "FAIL: $worker is not an executable file" >&2; exit 1; }
status=0
for needle in __basal_test --test-skip-seccomp --test-skip-landlock --test-weaken-startup-checks; do
  if grep -qaF -- "$needle" "$worker"; then
    echo "FAIL: $worker contains \"$needle\": it is a test-hooks build" >&2
    status=1
  fi
done
# The release worker takes `--parent-pid PID` (and the parent's `--address-space-limit`, `--cpu-limit`,
# `--uid`, `--gid`) and nothing else: a test switch is a usage error (exit 64), alone or beside a
# valid --parent-pid, before any confinement step or welcome.
for args in "--test-skip-seccomp" "--parent-pid $$ --test-skip-seccomp"; do
  set +e
  # shellcheck disable=SC2086  # $args is split into words on purpose
  "$worker" $args </dev/null >/dev/null 2>&1
  rc=$?
  set -e
  if [[ $rc != 64 ]]; then
    echo "FAIL: $worker $args exited with $rc, expected 64 (a release worker takes no test switch)" >&2
    status=1
  fi
done
if [[ $status == 0 ]]; then echo "OK: $worker has no test hooks"; fi
exit $status
