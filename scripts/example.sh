#!/usr/bin/env bash
# Quick start, part one: set up and build, then run examples/hello.js once with a throw-away
# journal and show what the journal recorded.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

scripts/setup.sh

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

echo "example: basal run examples/hello.js"
build/release/bin/basal run examples/hello.js --manifest examples/hello.manifest.json \
  --input '{"name":"operator"}' --db "$tmp/journal.db"

echo
echo "example: the journal of that run (basal journal)"
build/release/bin/basal journal --db "$tmp/journal.db"
