#!/usr/bin/env bash
# The static worker links no C++ demangler (docs/performance.md, "Idle worker RSS"): all of its text
# is resident in every idle worker, and libstdc++'s verbose terminate handler would bring its
# demangler (vterminate.o, cp-demangle.o) back, about 38 KB of text and 128 KiB of idle RSS as
# measured. src/worker/terminate.cpp replaces that handler; this fails if anything links it again.
#
#   tests/unit/worker_has_no_demangler.sh build/release/bin/ck-basal-worker
set -euo pipefail
worker=${1:?usage: worker_has_no_demangler.sh PATH-TO-ck-basal-worker}
[[ -x "$worker" ]] || { echo "FAIL: $worker is not an executable file" >&2; exit 1; }
symbols=$(nm "$worker") || { echo "FAIL: nm could not read $worker's symbols" >&2; exit 1; }
# The replacement is there (the check below would pass on a stripped worker too).
grep -q ' _ZN9__gnu_cxx27__verbose_terminate_handlerEv$' <<<"$symbols" ||
  { echo "FAIL: $worker has no __gnu_cxx::__verbose_terminate_handler (stripped, or not src/worker/terminate.cpp's)" >&2; exit 1; }
if grep -qE ' (__cxa_demangle|__gcclibcxx_demangle_callback)$' <<<"$symbols"; then
  echo "FAIL: $worker links libstdc++'s demangler (__cxa_demangle): something links the verbose terminate handler again" >&2
  exit 1
fi
echo "OK: $worker links no demangler"
