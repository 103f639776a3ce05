# ck-basal-worker.exe (cmake/windows.cmake): the Windows worker. Its startup is
# src/confinement/windows/ and src/worker/windows/; its engine is the Linux worker's own sources
# (src/worker/*.cpp) and QuickJS's core, fetched and integrity-checked from the same pinned npm
# package (cmake/quickjs.cmake), built with mingw-w64. The few Linux interfaces those sources use
# are given their Windows meaning in src/worker/windows/posix/. The web globals' bytecode comes
# from the host build (BASAL_HOST_BUILD): QuickJS bytecode does not depend on the system.

include(cmake/quickjs.cmake)

if(NOT BASAL_HOST_BUILD OR NOT EXISTS "${BASAL_HOST_BUILD}/src/worker/js/web_url_bytecode.cpp")
  message(FATAL_ERROR "basal: the Windows worker needs the web globals' bytecode from a Linux build of this source: "
                      "build it (cmake --build build/release --target basal_web_bytecode) and configure with "
                      "-DBASAL_HOST_BUILD=<that build directory>")
endif()
set(_host_js "${BASAL_HOST_BUILD}/src/worker/js")
# The host's arrays are aligned to 64 KiB, a Linux page-cache layout (docs/performance.md) that a
# PE object cannot express (its largest alignment is 8 KiB): copied with page alignment instead.
set(_bytecode_sources "")
foreach(bundle web_url web_core)
  set(_in "${_host_js}/${bundle}_bytecode.cpp")
  set(_out "${CMAKE_BINARY_DIR}/generated/worker/js/${bundle}_bytecode.cpp")
  add_custom_command(OUTPUT "${_out}"
    COMMAND ${CMAKE_COMMAND} -DIN=${_in} -DOUT=${_out} -P ${PROJECT_SOURCE_DIR}/cmake/windows_bytecode.cmake
    DEPENDS "${_in}" ${PROJECT_SOURCE_DIR}/cmake/windows_bytecode.cmake
    COMMENT "The ${bundle} bytecode, page-aligned for a PE image")
  list(APPEND _bytecode_sources "${_out}")
endforeach()

# The embedded JavaScript of the web globals (as src/worker/CMakeLists.txt makes it).
foreach(js timers fetch durable)
  set(BASAL_JS_NAME ${js})
  string(TOUPPER ${js} js_upper)
  string(SUBSTRING ${js_upper} 0 1 first)
  string(SUBSTRING ${js} 1 -1 rest)
  set(BASAL_JS_CONST "k${first}${rest}Source")
  file(READ ${PROJECT_SOURCE_DIR}/src/worker/js/${js}.js BASAL_JS_SOURCE)
  configure_file(src/worker/js/embed.h.in ${CMAKE_BINARY_DIR}/generated/worker/js/${js}_js.h @ONLY)
endforeach()

# The engine: the Linux worker's own sources, once, for the worker and the engine smoke test.
add_library(basal_worker_engine OBJECT
  src/worker/windows/flow_runner.cpp
  src/worker/engine.cpp src/worker/channel.cpp src/worker/own_memory.cpp src/worker/parent_frames.cpp
  src/worker/codec.cpp src/worker/web_globals.cpp src/worker/web_globals_table.cpp src/worker/web_natives.cpp
  src/worker/web_fetch.cpp src/worker/web_timers.cpp
  # A durable run's clocks and generators (durable.h). Not date_clock.cpp: Date reads the run's
  # clock through a GNU ld --wrap of gettimeofday that this image does not do (docs/sandbox.md:
  # durable runs on Windows wait for the Windows parent).
  src/worker/durable.cpp src/worker/chacha20.cpp
  ${_bytecode_sources})
# posix/ first: it stands in for the Linux headers the shared sources include.
target_include_directories(basal_worker_engine BEFORE PRIVATE ${PROJECT_SOURCE_DIR}/src/worker/windows/posix)
target_include_directories(basal_worker_engine PRIVATE ${CMAKE_BINARY_DIR}/generated ${BASAL_HOST_BUILD}/src ${_host_js})
target_link_libraries(basal_worker_engine PUBLIC basal_protocol basal_quickjs basal_flags advapi32)

add_executable(ck-basal-worker src/worker/windows/main.cpp)
target_link_libraries(ck-basal-worker PRIVATE basal_worker_engine basal_confinement_windows)
# A GUI-subsystem image (the design: no console is created or attached), entered at main.
target_link_options(ck-basal-worker PRIVATE -Wl,--subsystem,windows -Wl,-e,mainCRTStartup)
