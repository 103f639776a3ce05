# The Windows cross build (mingw-w64, cmake/mingw-w64.cmake): only the Windows worker, the
# launcher and the tests of their pure rules, with our warnings as errors. Included by the
# top-level CMakeLists.txt when CMAKE_SYSTEM_NAME is Windows, which then stops: the parent (epoll,
# pidfd, /proc) is not built for Windows yet (docs/sandbox.md, "What waits for Windows").
#
#   cmake -S . -B build/mingw --toolchain cmake/mingw-w64.cmake -DBASAL_HOST_BUILD=$PWD/build/release
#   cmake --build build/mingw -j2 && ctest --test-dir build/mingw     # the tests run under Wine
#
# BASAL_HOST_BUILD is a Linux build tree of this source whose web-global bytecode is built
# (target basal_web_bytecode): QuickJS bytecode is the same on both systems, and the compiler that
# makes it (basal-js-bundle) runs on the build machine.

set(BASAL_HOST_BUILD "" CACHE PATH "A Linux build tree of this source with basal_web_bytecode built (for the worker's web globals)")

# nlohmann-json is header-only: the Debian package's headers, and nothing else of /usr/include.
find_path(BASAL_NLOHMANN_DIR nlohmann/json.hpp PATHS /usr/include NO_CMAKE_FIND_ROOT_PATH REQUIRED)
file(MAKE_DIRECTORY "${CMAKE_BINARY_DIR}/host_headers")
file(CREATE_LINK "${BASAL_NLOHMANN_DIR}/nlohmann" "${CMAKE_BINARY_DIR}/host_headers/nlohmann" SYMBOLIC)

add_library(basal_flags INTERFACE)
target_compile_options(basal_flags INTERFACE -Wall -Wextra -Werror -fstack-protector-strong -ffunction-sections
                       -fdata-sections $<$<NOT:$<CONFIG:Debug>>:-D_FORTIFY_SOURCE=2>)
# Windows 10 APIs (AppContainer, job lists, mitigation policies); UTF-16 Win32 names.
target_compile_definitions(basal_flags INTERFACE _WIN32_WINNT=0x0A00 WINVER=0x0A00 UNICODE _UNICODE
                           WIN32_LEAN_AND_MEAN NOMINMAX)
# Statically linked C and C++ runtimes (and winpthreads): the images load system DLLs only.
target_link_options(basal_flags INTERFACE -static -Wl,--gc-sections -Wl,--dynamicbase -Wl,--nxcompat
                    -Wl,--high-entropy-va)
target_include_directories(basal_flags INTERFACE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include
                           ${CMAKE_BINARY_DIR}/host_headers)
target_link_libraries(basal_flags INTERFACE -lssp)

# The rules, pure (the same files the Linux build tests): the handle allowlist, tokens,
# mitigations, the worker's report, the job and environment, and every system's death rule.
add_library(basal_windows_rules STATIC
  src/confinement/windows/handle_allowlist.cpp src/confinement/windows/token_rules.cpp
  src/confinement/windows/mitigation_rules.cpp src/confinement/windows/report.cpp
  src/parent/platform/windows/job_limits.cpp
  src/parent/platform/death.cpp src/parent/platform/linux/death.cpp src/parent/platform/macos/death.cpp
  src/parent/platform/windows/death.cpp)
target_link_libraries(basal_windows_rules PUBLIC basal_flags)

# Win32: what the checks read (tokens, mitigations, the handle table) and the worker's startup.
add_library(basal_confinement_windows STATIC src/confinement/windows/nt.cpp src/confinement/windows/confine.cpp)
target_link_libraries(basal_confinement_windows PUBLIC basal_windows_rules ntdll advapi32)

add_library(basal_protocol STATIC src/protocol/frame.cpp src/protocol/messages.cpp)
target_link_libraries(basal_protocol PUBLIC basal_flags)

# The launcher (the Windows side of the platform seam) and the Welcome rule a Windows parent applies.
add_library(basal_windows_launcher STATIC src/parent/platform/windows/windows_launcher.cpp src/parent/welcome_check.cpp)
target_link_libraries(basal_windows_launcher PUBLIC basal_confinement_windows basal_protocol userenv advapi32)

add_executable(ck-basal-launch src/parent/platform/windows/launch_main.cpp)
target_link_libraries(ck-basal-launch PRIVATE basal_windows_launcher)

include(cmake/windows_worker.cmake)

# Tests: the pure rules' unit test, built with GoogleTest from Debian's googletest sources, run
# under Wine; and the Wine refusal test (tests/windows/CMakeLists.txt).
set(BASAL_TIMEOUT_unit 120)
set(BASAL_TIMEOUT_wine 300)
enable_testing()
set(_gtest /usr/src/googletest/googletest)
add_library(basal_gtest STATIC ${_gtest}/src/gtest-all.cc ${_gtest}/src/gtest_main.cc)
target_include_directories(basal_gtest SYSTEM PUBLIC ${_gtest}/include PRIVATE ${_gtest})
target_link_options(basal_gtest INTERFACE -static)
add_executable(windows_rules_test tests/unit/windows_rules_test.cpp)
target_link_libraries(windows_rules_test PRIVATE basal_windows_rules basal_gtest)
set_target_properties(windows_rules_test PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
add_test(NAME windows_rules_test COMMAND windows_rules_test)
set_tests_properties(windows_rules_test PROPERTIES LABELS unit TIMEOUT ${BASAL_TIMEOUT_unit}
                     ENVIRONMENT "WINEPREFIX=${CMAKE_BINARY_DIR}/wineprefix" FIXTURES_REQUIRED wine)
add_subdirectory(tests/windows)

add_test(NAME every_test_has_a_timeout
         COMMAND ${CMAKE_COMMAND} -DCTEST=${CMAKE_CTEST_COMMAND} -DBUILD_DIR=${CMAKE_BINARY_DIR}
                 -P ${PROJECT_SOURCE_DIR}/tests/every_test_has_a_timeout.cmake)
set_tests_properties(every_test_has_a_timeout PROPERTIES LABELS unit TIMEOUT ${BASAL_TIMEOUT_unit})
