#!/usr/bin/env bash
# Quick start: installs what is missing (apt-get, only for missing packages; QuickJS with npm pack),
# builds only what running a flow needs (basal and ck-basal-worker, Release), then runs
# examples/hello.js once with a throw-away journal and shows what the journal recorded. Measured
# from a fresh clone on 2 cores with g++, cmake, node and npm present (9 packages installed on the
# way, nothing cached): 2 min 34 s. From a bare Debian 12 (457 packages, most of them npm's):
# about 9 minutes on 2 idle cores, computed (README.md, docs/performance.md: what we measured).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

scripts/setup.sh --quick

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

echo "example: basal run examples/hello.js"
build/release/bin/basal run examples/hello.js --manifest examples/hello.manifest.json \
  --input '{"name":"operator"}' --db "$tmp/journal.db"

echo
echo "example: the journal of that run (basal journal)"
build/release/bin/basal journal --db "$tmp/journal.db"

echo
echo "example: done. Next: README.md (Using the CLI), docs/install.md (the Debian package)."
