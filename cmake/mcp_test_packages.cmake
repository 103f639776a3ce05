# `basal mcp` driven end to end by MCP software nobody here wrote (tests/mcp/mcp_client_test.mjs):
# the official MCP TypeScript SDK's client connects to `basal mcp` over stdio, and a reference MCP
# server (server-filesystem) is a codemode policy's downstream. The same client reaches `basal
# serve`'s /mcp over Streamable HTTP (tests/mcp/mcp_http_test.mjs). The packages are pinned by name,
# version and sha512 integrity in tests/mcp/package-lock.json (no registry address: tests/mcp/.npmrc)
# and installed at configure time with `npm ci` into ${CMAKE_BINARY_DIR}/mcp-test/, which checks
# every tarball against the lockfile's integrity (cmake/npm_test_packages.cmake). No package source
# is committed.
#
# Updating them: in a scratch copy of tests/mcp/ run
#   npm install --save-exact --ignore-scripts @modelcontextprotocol/client@V @modelcontextprotocol/server-filesystem@V
# and copy package.json and package-lock.json back (check `grep -c resolved package-lock.json` is 0).
#
# tests/CMakeLists.txt calls basal_mcp_client_test(), which installs the packages (once per
# lockfile: skipped while the lockfile installed last equals the source one), copies the test files
# beside them (Node resolves a test's imports from the folder it is in) and adds the ctest tests
# `mcp_client_test` and `mcp_http_test` (label integration). Edit the test in tests/mcp/; the build copies it again.
#
# Run it by hand after a build:
#   BASAL_BIN=build/release/bin/basal node --test build/release/mcp-test/mcp_client_test.mjs
#   BASAL_BIN=build/release/bin/basal node --test build/release/mcp-test/mcp_http_test.mjs

include(${CMAKE_CURRENT_LIST_DIR}/npm_test_packages.cmake)

function(basal_mcp_client_test)
  # A test-hooks build runs the confinement probe suite only (scripts/test.sh); its basal takes
  # flags a release one refuses. It needs no npm packages, so its configure fetches none.
  if(BASAL_TEST_HOOKS)
    return()
  endif()
  basal_npm_test_packages(SOURCE "${PROJECT_SOURCE_DIR}/tests/mcp" DEST "${CMAKE_BINARY_DIR}/mcp-test"
                          WHAT "the MCP client test")
  set(dir "${CMAKE_BINARY_DIR}/mcp-test")

  # Every test spawns `basal mcp` or `basal serve` (and through it workers and a Node reference
  # server); node runs a file's tests one at a time. The timeout is the integration label's
  # (tests/CMakeLists.txt).
  if(NOT BASAL_TIMEOUT_integration)
    set(BASAL_TIMEOUT_integration 300)
  endif()
  foreach(test mcp_client_test mcp_http_test)
    add_test(NAME ${test}
             COMMAND "${BASAL_NODE}" --test --test-reporter=spec "${dir}/${test}.mjs"
             WORKING_DIRECTORY "${dir}")
    set_tests_properties(${test} PROPERTIES
      LABELS integration
      TIMEOUT ${BASAL_TIMEOUT_integration}
      ENVIRONMENT "BASAL_BIN=$<TARGET_FILE:basal>;BASAL_WORKER=$<TARGET_FILE:ck-basal-worker>")
  endforeach()
endfunction()
