# npm packages that a test drives basal with, installed at configure time (basal_npm_test_packages),
# pinned by name, version and sha512 integrity in the test folder's package-lock.json (no registry
# address: the folder's .npmrc says omit-lockfile-registry-resolved). `npm ci` checks every tarball
# against the lockfile's integrity and runs no package's install scripts. No package source is
# committed.
#
#   basal_npm_test_packages(SOURCE ${PROJECT_SOURCE_DIR}/tests/console DEST ${CMAKE_BINARY_DIR}/console-test
#                           WHAT "the web console's browser test")
#
# installs the packages into DEST (once per lockfile: skipped while the lockfile installed last
# equals the source one) and copies the folder's *.mjs beside them (Node resolves a test's imports
# from the folder it is in; the build copies an edited test again).
#
# Updating a folder's packages: in a scratch copy of it run
#   npm install --save-exact --ignore-scripts NAME@VERSION ...
# and copy package.json and package-lock.json back (check `grep -c resolved package-lock.json` is 0).

function(basal_npm_test_packages)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "SOURCE;DEST;WHAT" "")
  if(NOT BASAL_NODE OR NOT BASAL_NPM)
    message(FATAL_ERROR "basal: node and npm are needed for ${arg_WHAT} (${arg_SOURCE}); "
                        "install Node.js 20 or later and npm")
  endif()
  execute_process(COMMAND "${BASAL_NODE}" -p "process.versions.node.split('.')[0]"
                  OUTPUT_VARIABLE node_major OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0 OR node_major LESS 20)
    message(FATAL_ERROR "basal: ${arg_WHAT} (${arg_SOURCE}) needs Node.js 20 or later "
                        "(its packages' engines field); ${BASAL_NODE} is version ${node_major}. "
                        "Debian 12's own nodejs is 18: install Node.js 20 or later (e.g. NodeSource's "
                        "Debian package), or configure with -DBASAL_BUILD_TESTS=OFF to build without tests.")
  endif()

  # Written after a successful `npm ci`, inside node_modules (which `npm ci` deletes first), so a
  # failed or interrupted install never passes for a finished one.
  set(stamp "${arg_DEST}/node_modules/.basal-installed-lock.json")
  file(MAKE_DIRECTORY "${arg_DEST}")
  # configure_file makes each a configure dependency: a changed lockfile reinstalls at the next build.
  foreach(f package.json package-lock.json .npmrc)
    configure_file("${arg_SOURCE}/${f}" "${arg_DEST}/${f}" COPYONLY)
  endforeach()

  set(installed FALSE)
  if(EXISTS "${stamp}")
    file(SHA256 "${stamp}" have)
    file(SHA256 "${arg_SOURCE}/package-lock.json" want)
    if(have STREQUAL want)
      set(installed TRUE)
    endif()
  endif()
  if(NOT installed)
    message(STATUS "basal: npm ci in ${arg_DEST} (${arg_WHAT}: its pinned packages)")
    execute_process(
      COMMAND "${BASAL_NPM}" ci --ignore-scripts --no-audit --no-fund --loglevel=error
      WORKING_DIRECTORY "${arg_DEST}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR
        "basal: `npm ci` failed (${rc}) in ${arg_DEST}, installing the packages pinned in "
        "${arg_SOURCE}/package-lock.json for ${arg_WHAT}:\n${out}${err}\n"
        "npm checks each package against the lockfile's integrity; a mismatch means the registry "
        "served something else than what was pinned. Check npm can reach its registry "
        "(`npm ping`), then configure again.")
    endif()
    configure_file("${arg_SOURCE}/package-lock.json" "${stamp}" COPYONLY)
  endif()

  file(GLOB tests CONFIGURE_DEPENDS "${arg_SOURCE}/*.mjs")
  foreach(f IN LISTS tests)
    get_filename_component(name "${f}" NAME)
    configure_file("${f}" "${arg_DEST}/${name}" COPYONLY)
  endforeach()
endfunction()
