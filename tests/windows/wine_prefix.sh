#!/usr/bin/env bash
# The private Wine prefix the Windows tests run in ($WINEPREFIX, under the build tree), headless.
#   wine_prefix.sh        stops a Wine left running in it, makes it afresh, and prints how long Wine
#                         took to make it and then to start a program in it
#   wine_prefix.sh stop   stops its Wine (wineserver and Wine's own services), after the tests
set -euo pipefail
: "${WINEPREFIX:?WINEPREFIX must name the prefix to use}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
wineserver=/usr/lib/wine/wineserver
[[ -x "$wineserver" ]] || wineserver="$(command -v wineserver)"
export WINEPREFIX
if [[ -d "$WINEPREFIX" ]]; then "$wineserver" -k 2>/dev/null || true; fi
if [[ "${1:-}" == stop ]]; then exit 0; fi
case "$WINEPREFIX" in */wineprefix) rm -rf "$WINEPREFIX" ;; *) echo "wine_prefix: refusing to remove $WINEPREFIX (not a */wineprefix)" >&2; exit 1 ;; esac
start=$(date +%s%N)
"$here/wine.sh" cmd.exe /c exit 0 >/dev/null 2>&1 || true  # the first start makes the prefix
made=$(date +%s%N)
"$here/wine.sh" cmd.exe /c exit 0 >/dev/null 2>&1 || true  # what each later start costs
ran=$(date +%s%N)
[[ -d "$WINEPREFIX/drive_c/windows" ]] || { echo "wine_prefix: Wine made no prefix in $WINEPREFIX" >&2; exit 1; }
echo "wine_prefix: a fresh prefix in $(( (made - start) / 1000000 )) ms; a later start $(( (ran - made) / 1000000 )) ms"
