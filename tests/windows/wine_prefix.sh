#!/usr/bin/env bash
# Makes the private Wine prefix the Windows tests run in ($WINEPREFIX, under the build tree),
# headless, and prints how long Wine took to make it and then to start a program in it.
set -euo pipefail
: "${WINEPREFIX:?WINEPREFIX must name the prefix to use}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
start=$(date +%s%N)
"$here/wine.sh" cmd.exe /c exit 0 >/dev/null 2>&1 || true  # the first start makes the prefix
made=$(date +%s%N)
"$here/wine.sh" cmd.exe /c exit 0 >/dev/null 2>&1 || true  # what each later start costs
ran=$(date +%s%N)
[[ -d "$WINEPREFIX/drive_c/windows" ]] || { echo "wine_prefix: Wine made no prefix in $WINEPREFIX" >&2; exit 1; }
echo "wine_prefix: first start (makes the prefix) $(( (made - start) / 1000000 )) ms; a later start $(( (ran - made) / 1000000 )) ms"
