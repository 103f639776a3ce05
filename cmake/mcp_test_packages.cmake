# `basal mcp` driven end to end by MCP software nobody here wrote (tests/mcp/mcp_client_test.mjs):
# the official MCP TypeScript SDK's client connects to `basal mcp` over stdio, and a reference MCP
# server (server-filesystem) is a codemode policy's downstream. The same client reaches `basal
# serve`'s /mcp over Streamable HTTP (tests/mcp/mcp_http_test.mjs). The packages are pinned by name,
# version and sha512 integrity in tests/mcp/package-lock.json (no registry address: tests/mcp/.npmrc)
# and installed at configure time with `npm ci` into ${CMAKE_BINARY_DIR}/mcp-test/, which checks
# every tarball against the lockfile's integrity. No package source is committed.
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

function(basal_mcp_client_test)
  # A test-hooks build runs the confinement probe suite only (scripts/test.sh); its basal takes
  # flags a release one refuses. It needs no npm packages, so its configure fetches none.
  if(BASAL_TEST_HOOKS)
    return()
  endif()
  if(NOT BASAL_NODE OR NOT BASAL_NPM)
    message(FATAL_ERROR "basal: node and npm are needed for the MCP client test (tests/mcp/); "
                        "install Node.js 20 or later and npm")
  endif()
  execute_process(COMMAND "${BASAL_NODE}" -p "process.versions.node.split('.')[0]"
                  OUTPUT_VARIABLE node_major OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0 OR node_major LESS 20)
    message(FATAL_ERROR "basal: the MCP client test (tests/mcp/) needs Node.js 20 or later "
                        "(the MCP SDK's engines field); ${BASAL_NODE} is version ${node_major}. "
                        "Debian 12's own nodejs is 18: install Node.js 20 or later (e.g. NodeSource's "
                        "Debian package), or configure with -DBASAL_BUILD_TESTS=OFF to build without tests.")
  endif()

  set(src "${PROJECT_SOURCE_DIR}/tests/mcp")
  set(dir "${CMAKE_BINARY_DIR}/mcp-test")
  # Written after a successful `npm ci`, inside node_modules (which `npm ci` deletes first), so a
  # failed or interrupted install never passes for a finished one.
  set(stamp "${dir}/node_modules/.basal-installed-lock.json")
  file(MAKE_DIRECTORY "${dir}")
  # configure_file makes each a configure dependency: a changed lockfile reinstalls at the next build.
  foreach(f package.json package-lock.json .npmrc)
    configure_file("${src}/${f}" "${dir}/${f}" COPYONLY)
  endforeach()

  set(installed FALSE)
  if(EXISTS "${stamp}")
    file(SHA256 "${stamp}" have)
    file(SHA256 "${src}/package-lock.json" want)
    if(have STREQUAL want)
      set(installed TRUE)
    endif()
  endif()
  if(NOT installed)
    message(STATUS "basal: npm ci in ${dir} (the MCP client test's pinned packages)")
    execute_process(
      COMMAND "${BASAL_NPM}" ci --ignore-scripts --no-audit --no-fund --loglevel=error
      WORKING_DIRECTORY "${dir}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR
        "basal: `npm ci` failed (${rc}) in ${dir}, installing the packages pinned in "
        "tests/mcp/package-lock.json for the MCP client test:\n${out}${err}\n"
        "npm checks each package against the lockfile's integrity; a mismatch means the registry "
        "served something else than what was pinned. Check npm can reach its registry "
        "(`npm ping`), then configure again.")
    endif()
    configure_file("${src}/package-lock.json" "${stamp}" COPYONLY)
  endif()

  file(GLOB tests CONFIGURE_DEPENDS "${src}/*.mjs")
  foreach(f IN LISTS tests)
    get_filename_component(name "${f}" NAME)
    configure_file("${f}" "${dir}/${name}" COPYONLY)
  endforeach()

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
