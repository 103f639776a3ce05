#!/usr/bin/env bash
# Measures the README's quick start as a new user meets it, timed with bash's `time` (wall, and the
# CPU of everything it ran: apt-get, dpkg, npm, cmake, the compiler), the machine's load printed
# before and after (on a shared machine the wall time is not the idle figure, the CPU time is). Not
# run in CI; docs/performance.md (The quick start) has the figures and how to read them.
#
#   sudo scripts/quickstart-check.sh [BRANCH]          a bare Debian 12 (mmdebstrap's minbase with
#                                                      git), a fresh clone of BRANCH in it, then
#                                                      `scripts/example.sh` exactly as the README says
#   scripts/quickstart-check.sh --here [BRANCH]        this machine as it is: a fresh clone of BRANCH
#                                                      in a new temporary folder, ccache off, an empty
#                                                      npm cache, then `scripts/example.sh`; packages
#                                                      the machine has are not installed again
#
# BRANCH defaults to the checkout's current branch. The bare mode needs root, mmdebstrap (apt-get
# install mmdebstrap) and the host's Debian mirror (the first Debian URI in /etc/apt/sources.list or
# /etc/apt/sources.list.d/*.sources; override with QUICKSTART_MIRROR=URI). QUICKSTART_DIR: where the
# root or the clone is made (default: a new folder in /var/tmp); it is removed at the end.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ "${1:-}" == --here ]]; then
  branch="${2:-$(git rev-parse --abbrev-ref HEAD)}"
  work="$(mktemp -d "${QUICKSTART_DIR:-/var/tmp}/quickstart.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  git clone --quiet --single-branch --branch "$branch" . "$work/basal"
  echo "quickstart-check: $(nproc) cores; a fresh clone of $(git -C "$work/basal" rev-parse --short HEAD) in $work/basal"
  echo "quickstart-check: load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  (cd "$work/basal" &&
    env -u CMAKE_CXX_COMPILER_LAUNCHER -u CMAKE_C_COMPILER_LAUNCHER CCACHE_DISABLE=1 \
      npm_config_cache="$work/npm-cache" bash -c 'time scripts/example.sh')
  echo "quickstart-check: load after: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "quickstart-check: real is the wall time; user + sys the CPU time of everything it ran"
  exit 0
fi

if [[ "$(id -u)" != 0 ]]; then
  echo "quickstart-check: needs root (mmdebstrap, chroot, mount)" >&2
  exit 1
fi
if ! command -v mmdebstrap >/dev/null 2>&1; then
  echo "quickstart-check: needs mmdebstrap: apt-get install -y mmdebstrap" >&2
  exit 1
fi
branch="${1:-$(git rev-parse --abbrev-ref HEAD)}"

mirror="${QUICKSTART_MIRROR:-}"
if [[ -z "$mirror" ]]; then
  mirror="$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '/^URIs:/ && $2 ~ /\/debian\/?$/ {print $2; exit}')"
fi
if [[ -z "$mirror" ]]; then
  mirror="$(awk '$1 == "deb" && $2 ~ /\/debian\/?$/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)"
fi
if [[ -z "$mirror" ]]; then
  echo "quickstart-check: no Debian mirror found in /etc/apt; set QUICKSTART_MIRROR" >&2
  exit 1
fi
security="${mirror%/debian}"
security="${security%/}/debian-security"

work="$(mktemp -d "${QUICKSTART_DIR:-/var/tmp}/quickstart.XXXXXX")"
root="$work/root"
mounted=()
cleanup() {
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -R "${mounted[i]}" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

echo "quickstart-check: a bare Debian 12 (minbase + git) from $mirror in $root"
mmdebstrap --quiet --variant=minbase --include=git bookworm "$root" \
  "deb $mirror bookworm main" "deb $mirror bookworm-updates main" "deb $security bookworm-security main"
cp /etc/resolv.conf "$root/etc/resolv.conf"
# npm in the root reaches the registry as the host's does: the host's global npm configuration (a
# registry, a proxy, the CA of a TLS-inspecting proxy) and the CA file it names, if any.
# The CA file is copied apart: ca-certificates, installed by the quick start, rewrites the system's.
if [[ -f /etc/npmrc ]]; then
  grep -v -E '^[[:space:]]*cafile[[:space:]]*=' /etc/npmrc > "$root/etc/npmrc" || true
  cafile="$(awk -F= '$1 ~ /^[[:space:]]*cafile[[:space:]]*$/ {gsub(/^[[:space:]]+|[[:space:]]+$/, "", $2); print $2}' /etc/npmrc)"
  if [[ -n "$cafile" && -f "$cafile" ]]; then
    cp "$cafile" "$root/etc/quickstart-check-npm-ca.crt"
    echo "cafile=/etc/quickstart-check-npm-ca.crt" >> "$root/etc/npmrc"
  fi
fi

# The clone's source: a bare copy of the branch, read inside the root (a worktree's .git points
# outside it).
git clone --quiet --bare --single-branch --branch "$branch" . "$work/src.git"
mkdir -p "$root/mnt/src.git"
mount --bind "$work/src.git" "$root/mnt/src.git"; mounted+=("$root/mnt/src.git")
mount -t proc proc "$root/proc"; mounted+=("$root/proc")
mount --rbind /sys "$root/sys"; mount --make-rslave "$root/sys"; mounted+=("$root/sys")
mount --rbind /dev "$root/dev"; mount --make-rslave "$root/dev"; mounted+=("$root/dev")

echo "quickstart-check: $(nproc) cores; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  bash -c 'set -e; git clone --quiet /mnt/src.git /root/basal; cd /root/basal
           echo "quickstart-check: a fresh clone of $(git rev-parse --short HEAD); running scripts/example.sh"
           time scripts/example.sh'
echo "quickstart-check: load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "quickstart-check: real is the wall time; user + sys the CPU time of everything it ran"
