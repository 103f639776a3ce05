#!/usr/bin/env bash
# The worker's cold code stays in .text.basal_lazy (src/worker/lazy_text.ld, docs/performance.md,
# "Idle worker RSS"): every page of the worker's ordinary text is resident in every idle worker, so
# code a worker does not run while it works is gathered in its own segment, which an idle worker
# never faults in. The script names its files and sections by pattern; if one stops matching (a
# renamed glibc member, a QuickJS upgrade), that code silently returns to the resident text and the
# idle RSS grows by its size. This fails then, naming the function. It also fails if code every
# worker runs at its start is placed there (it would make a lazy block resident in every worker).
#
#   tests/unit/worker_cold_text_is_lazy.sh build/release/bin/ck-basal-worker
set -euo pipefail
worker=${1:?usage: worker_cold_text_is_lazy.sh PATH-TO-ck-basal-worker}
[[ -x "$worker" ]] || { echo "FAIL: $worker is not an executable file" >&2; exit 1; }
symbols=$(nm "$worker") || { echo "FAIL: nm could not read $worker's symbols" >&2; exit 1; }
read -r lazy_start lazy_size < <(readelf -SW "$worker" | awk '$2 == ".text.basal_lazy" {print $4, $6}')
[[ -n "${lazy_start:-}" ]] || { echo "FAIL: $worker has no .text.basal_lazy section (lazy_text.ld not used?)" >&2; exit 1; }
lazy_start=$((16#$lazy_start))
lazy_end=$((lazy_start + 16#$lazy_size))

# Its own PT_LOAD (a mapping of its own): fault-around never crosses into another mapping, but
# within one mapping the kernel may map the lazy pages beside the resident text's.
own_load=0
while read -r vaddr; do
  ((vaddr == lazy_start)) && own_load=1
done < <(readelf -lW "$worker" | awk '$1 == "LOAD" {print $3}')
if ((!own_load)); then
  echo "FAIL: .text.basal_lazy does not begin a PT_LOAD of its own (it shares the resident text's mapping)" >&2
  exit 1
fi

address() {  # the address of a function symbol, or nothing when the worker does not link it
  awk -v name="$1" '$3 == name && $2 ~ /^[tTwW]$/ {print $1; exit}' <<<"$symbols"
}
status=0
# One function from each group lazy_text.ld gathers. A function the link dropped is fine (not
# linked costs nothing), but the first entries are always linked: the check cannot pass vacuously.
always=(js_regexp_exec js_map_constructor bf_atof lre_exec)
cold=("${always[@]}" js_array_buffer_slice js_date_constructor unicode_normalize
      __gconv_transform_utf8_internal __dcigettext __vfwprintf_internal ____strtof128_l_internal
      __addtf3 _dl_open __strcmp_sse2 __strcasecmp_l_sse42)
for f in "${cold[@]}"; do
  a=$(address "$f")
  if [[ -z "$a" ]]; then
    if [[ " ${always[*]} " == *" $f "* ]]; then echo "FAIL: $worker has no $f (stripped?)" >&2; status=1; fi
    continue
  fi
  a=$((16#$a))
  if ((a < lazy_start || a >= lazy_end)); then
    echo "FAIL: $f is in the worker's resident text, not .text.basal_lazy: a pattern of src/worker/lazy_text.ld no longer matches it" >&2
    status=1
  fi
done
# Run by every worker (at its start or in every activation): never lazy.
for f in bf_context_init _dl_protect_relro JS_CallInternal __libc_malloc JS_ReadObject JS_ReadObjectRec; do
  a=$(address "$f")
  [[ -n "$a" ]] || { echo "FAIL: $worker has no $f" >&2; status=1; continue; }
  a=$((16#$a))
  if ((a >= lazy_start && a < lazy_end)); then
    echo "FAIL: $f, which every worker runs, is in .text.basal_lazy: it would make a lazy block resident in every worker" >&2
    status=1
  fi
done
((status == 0)) && echo "OK: $worker keeps its cold code in .text.basal_lazy"
exit "$status"
