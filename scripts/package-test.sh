#!/usr/bin/env bash
# The Debian package, end to end, as root on this machine (scripts/test.sh runs it in CI):
# builds basal_*.deb from build/release (cmake/package.cmake), installs it with apt-get, uses it
# from /usr as an administrator would (basal --version, basal doctor, a flow, the service's own
# command line as its user, man, completion), removes it and purges it, and checks what each step
# leaves. Exits non-zero naming the first thing that was wrong. docs/install.md describes the package.
#
#   scripts/package-test.sh [BUILD_DIR]      (default build/release, configured by scripts/setup.sh)
#
# It refuses to run where basal is installed already, and restores the machine it found: the
# users basal and basal-worker stay after a purge (as Debian asks), so this script deletes them
# afterwards if it was the one that created them.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${1:-build/release}

fail() {
  echo "package-test: FAILED: $*" >&2
  exit 1
}
step() { echo "package-test: $*"; }

[[ "$(id -u)" == 0 ]] || fail "run me as root: I install, remove and purge a package"
if [[ "$(dpkg-query -W -f='${Status}' basal 2>/dev/null || true)" == *installed* ]]; then
  fail "basal is installed on this machine already (dpkg -l basal); remove it first: apt-get purge basal"
fi
for tool in cpack dpkg-shlibdeps man curl runuser setpriv pgrep; do
  command -v "$tool" >/dev/null || fail "$tool is missing (scripts/setup.sh installs what this needs)"
done

apt_get() { DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 "$@"; }
had_user=()
for u in basal basal-worker; do getent passwd "$u" >/dev/null && had_user+=("$u"); done
scratch="$(mktemp -d)"
serve_pid=""
cleanup() {
  if [[ -n "$serve_pid" ]]; then kill "$serve_pid" 2>/dev/null || true; fi
  if [[ "$(dpkg-query -W -f='${Status}' basal 2>/dev/null || true)" != "" ]]; then
    apt_get purge -y basal >/dev/null 2>&1 || dpkg --purge basal >/dev/null 2>&1 || true
  fi
  for u in basal-worker basal; do
    if [[ " ${had_user[*]} " != *" $u "* ]] && getent passwd "$u" >/dev/null; then
      # userdel refuses while a process runs as the user (a worker still exiting): retry a while.
      for _ in $(seq 1 50); do userdel "$u" >/dev/null 2>&1 && break; sleep 0.1; done
      getent passwd "$u" >/dev/null && echo "package-test: could not delete the user $u it created" >&2
      if getent group "$u" >/dev/null; then groupdel "$u" >/dev/null 2>&1 || true; fi
    fi
  done
  rm -rf "$scratch"
}
trap cleanup EXIT

step "building the package from $build"
cmake --build "$build" -j2 --target basal ck-basal-worker basal_reference
rm -f "$build"/basal_*.deb
(cd "$build" && cpack -G DEB >"$scratch/cpack.log" 2>&1) || { cat "$scratch/cpack.log" >&2; fail "cpack"; }
debs=("$build"/basal_*.deb)
[[ ${#debs[@]} == 1 && -f "${debs[0]}" ]] || fail "cpack made no basal_*.deb in $build"
deb="$(realpath "${debs[0]}")"
version="$(dpkg-deb -f "$deb" Version)"
project_version="$(sed -n 's/^project(basal VERSION \([0-9.]*\) .*/\1/p' CMakeLists.txt)"
[[ "${version%-*}" == "$project_version" ]] || fail "package version $version does not follow the project's $project_version"
step "$(basename "$deb"): Depends: $(dpkg-deb -f "$deb" Depends)"
dpkg-deb -f "$deb" Depends | grep -q 'libc6' || fail "no shared library dependencies: dpkg-shlibdeps did not run"
dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\./|/|' | grep -v '/$' >"$scratch/files"

step "installing it (apt-get install ./$(basename "$deb"))"
apt_get install -y --no-install-recommends "$deb" >"$scratch/install.log" 2>&1 || { cat "$scratch/install.log" >&2; fail "apt-get install"; }
while read -r f; do [[ -e "$f" ]] || fail "$f of the package is not on disk after install"; done <"$scratch/files"

step "what postinst made: the users and directories, and no service enabled or started"
for u in basal basal-worker; do getent passwd "$u" >/dev/null || fail "no user $u after install"; done
[[ "$(stat -c '%U %G %a' /var/lib/basal)" == "basal basal 700" ]] || fail "/var/lib/basal is $(stat -c '%U %G %a' /var/lib/basal), not basal basal 700"
[[ "$(stat -c '%U %G %a' /run/basal)" == "basal basal 755" ]] || fail "/run/basal is $(stat -c '%U %G %a' /run/basal), not basal basal 755"
enabled="$(find /etc/systemd -name basal.service 2>/dev/null || true)"
[[ -z "$enabled" ]] || fail "basal.service was enabled by the package: $enabled"
if pgrep -u basal -x basal >/dev/null; then fail "a basal runs as the user basal: the package started something"; fi
dpkg-query -W -f='${Conffiles}\n' basal | grep -q '/etc/basal/serve.json' || fail "/etc/basal/serve.json is not a conffile"

step "basal --version, basal doctor, a flow, from /usr"
[[ "$(command -v basal)" == /usr/bin/basal ]] || fail "basal on PATH is $(command -v basal), not /usr/bin/basal"
/usr/bin/basal --version | head -n 1 | grep -q "^basal $project_version (" || fail "basal --version: $(/usr/bin/basal --version)"
/usr/bin/basal doctor >"$scratch/doctor.txt" || { cat "$scratch/doctor.txt" >&2; fail "basal doctor refused the installed worker"; }
grep -qx 'worker:                /usr/libexec/basal/ck-basal-worker' "$scratch/doctor.txt" || fail "doctor did not use /usr/libexec/basal/ck-basal-worker: $(head -n 1 "$scratch/doctor.txt")"
grep -q '^worker user: *basal-worker ' "$scratch/doctor.txt" || fail "as root, workers did not run as basal-worker: $(grep 'worker user' "$scratch/doctor.txt")"
ex=/usr/share/doc/basal/examples
out="$(cd "$scratch" && /usr/bin/basal run $ex/hello.js --manifest $ex/hello.manifest.json --input '{"name":"package"}' --db "$scratch/j.db")"
[[ "$out" == '{"greeting":"hello package"}' ]] || fail "hello flow printed: $out"

step "as the user basal: approve a flow into /var/lib/basal, then the unit's own ExecStart serves it"
cp $ex/hello.js $ex/hello.manifest.json "$scratch/" && chmod 0755 "$scratch" && chmod 0644 "$scratch"/hello.*
runuser -u basal -- /usr/bin/basal flow approve hello "$scratch/hello.js" --manifest "$scratch/hello.manifest.json" \
  --yes --db /var/lib/basal/journal.db >/dev/null || fail "basal flow approve as the user basal into /var/lib/basal"
exec_start="$(sed -n 's/^ExecStart=//p' /lib/systemd/system/basal.service)"
[[ "$exec_start" == "/usr/bin/basal serve --config /etc/basal/serve.json --db /var/lib/basal/journal.db" ]] ||
  fail "the unit's ExecStart is: $exec_start"
# As systemd would run it: the unit's user, RUNTIME_DIRECTORY=/run/basal (the socket goes there).
# setpriv execs it (runuser would stay its parent, and turn a SIGTERM into a kill).
# shellcheck disable=SC2086  # ExecStart is a command line of plain words
setpriv --reuid=basal --regid=basal --init-groups env RUNTIME_DIRECTORY=/run/basal $exec_start 2>"$scratch/serve.log" &
serve_pid=$!
for _ in $(seq 1 300); do
  curl -sf --unix-socket /run/basal/basal.sock http://basal/readyz >/dev/null && break
  kill -0 "$serve_pid" 2>/dev/null || { cat "$scratch/serve.log" >&2; fail "basal serve (the unit's ExecStart) exited"; }
  sleep 0.1
done
reply="$(curl -sS --unix-socket /run/basal/basal.sock -d '{"input": {"name": "service"}}' 'http://basal/v1/flows/hello/runs?wait=30s')"
[[ "$reply" == *'"result":{"greeting":"hello service"}'* ]] || fail "a run through the installed service answered: $reply"
kill -TERM "$serve_pid"
wait "$serve_pid" || fail "basal serve did not drain and exit 0 on SIGTERM: $(tail -n 3 "$scratch/serve.log")"
serve_pid=""

step "man pages and completion"
[[ "$(man -w basal)" == /usr/share/man/man1/basal.1.gz ]] || fail "man -w basal: $(man -w basal 2>&1)"
for command in $(/usr/bin/basal --help | sed -n '/^Subcommands:/,/^$/p' | awk 'NR > 1 && NF {print $1}'); do
  man -w "basal-$command" >/dev/null 2>&1 || fail "no man page for basal $command (man basal-$command)"
done
man -w 5 basal-manifest >/dev/null || fail "man 5 basal-manifest"
MANWIDTH=80 man basal-run 2>&1 | grep -q -- '--manifest FILE' || fail "man basal-run does not render its options"
mkdir "$scratch/empty"  # no file there starts with "he"
completed="$(cd "$scratch/empty" && bash --norc --noprofile -c 'source /usr/share/bash-completion/completions/basal
  COMP_WORDS=(basal run --db /var/lib/basal/journal.db he); COMP_CWORD=4; _basal; printf "%s\n" "${COMPREPLY[@]}"')"
[[ "$completed" == hello ]] || fail "bash completion of 'basal run --db /var/lib/basal/journal.db he' gave: $completed"
zcat /usr/share/doc/basal/changelog.Debian.gz | dpkg-parsechangelog -l- -SVersion | grep -qx "$version" ||
  fail "/usr/share/doc/basal/changelog.Debian.gz is not for $version"

step "removing it (apt-get remove): no binary left; configuration, state and users stay"
apt_get remove -y basal >"$scratch/remove.log" 2>&1 || { cat "$scratch/remove.log" >&2; fail "apt-get remove"; }
[[ "$(dpkg-query -W -f='${Status}' basal)" == "deinstall ok config-files" ]] || fail "after remove: $(dpkg-query -W -f='${Status}' basal)"
while read -r f; do
  [[ "$f" == /etc/basal/serve.json || ! -e "$f" ]] || fail "$f is still there after apt-get remove"
done <"$scratch/files"
[[ -f /etc/basal/serve.json && -f /var/lib/basal/journal.db ]] || fail "remove deleted the configuration or the store"

step "purging it (apt-get purge): configuration and state go, the users stay"
apt_get purge -y basal >"$scratch/purge.log" 2>&1 || { cat "$scratch/purge.log" >&2; fail "apt-get purge"; }
[[ -z "$(dpkg-query -W -f='${Status}' basal 2>/dev/null || true)" ]] || fail "after purge dpkg still knows basal"
for f in /etc/basal /var/lib/basal /run/basal; do [[ ! -e "$f" ]] || fail "$f is still there after purge"; done
for u in basal basal-worker; do getent passwd "$u" >/dev/null || fail "purge deleted the user $u (Debian keeps system users)"; done

step "passed ($(basename "$deb"), $(dpkg-deb -f "$deb" Installed-Size) KiB installed)"
