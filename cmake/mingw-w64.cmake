# The mingw-w64 cross toolchain (Debian 12's g++-mingw-w64-x86-64-posix): builds the Windows
# worker, the launcher and their tests (cmake/windows.cmake) on Linux.
#
#   cmake -S . -B build/mingw --toolchain cmake/mingw-w64.cmake -DBASAL_HOST_TOOLS=build/release
#
# The posix thread model, linked statically, so the binaries load only system DLLs (the worker's
# mitigation policy admits Microsoft-signed images alone).
set(CMAKE_SYSTEM_NAME Windows)
set(CMAKE_SYSTEM_PROCESSOR x86_64)
set(CMAKE_C_COMPILER x86_64-w64-mingw32-gcc-posix)
set(CMAKE_CXX_COMPILER x86_64-w64-mingw32-g++-posix)
set(CMAKE_RC_COMPILER x86_64-w64-mingw32-windres)
set(CMAKE_FIND_ROOT_PATH /usr/x86_64-w64-mingw32)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# ctest runs the Windows tests under Wine, in the build tree's own prefix (tests/windows/wine.sh).
set(CMAKE_CROSSCOMPILING_EMULATOR "${CMAKE_CURRENT_LIST_DIR}/../tests/windows/wine.sh")
