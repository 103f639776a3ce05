#!/usr/bin/env bash
# Runs a cross-built Windows program under Debian's Wine, headless, in a private prefix: the one
# WINEPREFIX names, else the wineprefix folder of the build tree holding the program (Wine makes a
# missing prefix on first use; the tests' wine_prefix fixture makes a fresh one before them). Used
# as ctest's CROSSCOMPILING_EMULATOR for the mingw build and by the Wine tests.
#   tests/windows/wine.sh PROGRAM.exe [ARGS...]
set -euo pipefail
wine=""
for candidate in /usr/lib/wine/wine64 "$(command -v wine64 || true)" "$(command -v wine || true)"; do
  if [[ -n "$candidate" && -x "$candidate" ]]; then wine="$candidate"; break; fi
done
if [[ -z "$wine" ]]; then
  echo "wine.sh: Wine is not installed (apt-get install wine64; scripts/setup.sh does)" >&2
  exit 127
fi
if [[ -z "${WINEPREFIX:-}" ]]; then
  here="$(cd "$(dirname "$1")" && pwd)"
  # The build tree holding the program (its bin/ or tests/ folder's parent).
  WINEPREFIX="$(dirname "$here")/wineprefix"
fi
export WINEPREFIX
export WINEDEBUG="${WINEDEBUG:--all}"
export WINEDLLOVERRIDES="${WINEDLLOVERRIDES:-mscoree,mshtml=}"  # no Mono or Gecko installer prompts
unset DISPLAY WAYLAND_DISPLAY
exec "$wine" "$@"
