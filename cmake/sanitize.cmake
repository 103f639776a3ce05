# Sanitizers (BASAL_SANITIZE, the `asan` preset) and libFuzzer (BASAL_FUZZ, scripts/fuzz.sh).
#
# basal_flags adds the sanitizer flags to every target of ours except those with the property
# BASAL_UNSANITIZED: the worker and what it links. The worker confines itself, and a sanitized
# worker cannot run confined: under RLIMIT_AS (its heap budget plus headroom) the ASan runtime
# cannot reserve its shadow memory, and the runtime's reports and LeakSanitizer's exit pass make
# calls the seccomp filter rightly kills. The parent is what reads hostile input (every frame a
# worker sends), so a sanitized build sanitizes the parent, the CLI and the tests, and runs them
# against the same unsanitized, confined worker a release build has.

# basal_worker_side(<library>): defines `<library>_worker`, the library as the worker links it.
# In a BASAL_SANITIZE build it is a second, unsanitized build of <library>: the same sources,
# include directories, definitions, options and links (with the libraries already given a worker
# side swapped for theirs). In any other build (a BASAL_FUZZ build has no worker) it is an alias
# of <library>. Call it in the
# directory that defines <library> (a generated source is only built there), after its
# target_* calls.
function(basal_worker_side library)
  # The worker's side is compiled file by file even in a unity build (BASAL_UNITY_BUILD): the
  # worker's image stays the one docs/performance.md measures and src/worker/lazy_text.ld lays out.
  if(NOT BASAL_SANITIZE OR BASAL_FUZZ)
    set_target_properties(${library} PROPERTIES UNITY_BUILD OFF)
    add_library(${library}_worker ALIAS ${library})
    return()
  endif()
  get_target_property(sources ${library} SOURCES)
  add_library(${library}_worker STATIC ${sources})
  set_target_properties(${library}_worker PROPERTIES BASAL_UNSANITIZED ON UNITY_BUILD OFF)
  get_property(worker_side GLOBAL PROPERTY BASAL_WORKER_SIDE_LIBRARIES)
  foreach(property INCLUDE_DIRECTORIES INTERFACE_INCLUDE_DIRECTORIES INTERFACE_SYSTEM_INCLUDE_DIRECTORIES
                   COMPILE_DEFINITIONS INTERFACE_COMPILE_DEFINITIONS COMPILE_OPTIONS INTERFACE_COMPILE_OPTIONS
                   LINK_LIBRARIES INTERFACE_LINK_LIBRARIES)
    get_target_property(values ${library} ${property})
    if(NOT values)
      continue()
    endif()
    set(swapped "")
    foreach(value IN LISTS values)
      foreach(other IN LISTS worker_side)
        # A PRIVATE dependency of a static library appears as $<LINK_ONLY:name> in its interface.
        if(value STREQUAL other)
          set(value ${other}_worker)
        elseif(value STREQUAL "$<LINK_ONLY:${other}>")
          set(value "$<LINK_ONLY:${other}_worker>")
        endif()
      endforeach()
      list(APPEND swapped "${value}")
    endforeach()
    set_property(TARGET ${library}_worker PROPERTY ${property} "${swapped}")
  endforeach()
  set_property(GLOBAL APPEND PROPERTY BASAL_WORKER_SIDE_LIBRARIES ${library})
endfunction()
