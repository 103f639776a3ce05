# JavaScript packages the worker's web globals are built from (docs/runtime.md), fetched at
# configure time like QuickJS (cmake/quickjs.cmake): `npm pack NAME@VERSION` into the build tree,
# the tarball's sha512 checked against the integrity pinned here, then unpacked. No package source
# is committed. Each package is one line:
#
#   basal_js_package(whatwg-url 14.2.0 "sha512-...")   # as `npm view whatwg-url@14.2.0 dist.integrity` prints it
#   # -> BASAL_JS_PACKAGE_DIR_whatwg-url: the unpacked package (the folder holding its package.json)
#
# and basal_js_bundle() turns packages and our own modules into QuickJS bytecode linked into the
# worker (src/worker/tools/js_bundle.cpp says how).
#
# Offline builds: set BASAL_JS_TARBALL_DIR to a folder holding the NAME-VERSION.tgz files (as
# `npm pack` names them); they are integrity-checked all the same.

set(BASAL_JS_TARBALL_DIR "" CACHE PATH
    "A folder of pre-fetched npm tarballs (NAME-VERSION.tgz) to use instead of `npm pack` (still integrity-checked)")

function(basal_js_package name version integrity)
  set(dir "${CMAKE_BINARY_DIR}/_deps/js")
  set(tgz "${dir}/${name}-${version}.tgz")
  set(out "${dir}/${name}-${version}")
  file(MAKE_DIRECTORY "${dir}")
  if(BASAL_JS_TARBALL_DIR AND EXISTS "${BASAL_JS_TARBALL_DIR}/${name}-${version}.tgz")
    configure_file("${BASAL_JS_TARBALL_DIR}/${name}-${version}.tgz" "${tgz}" COPYONLY)
  endif()
  if(EXISTS "${tgz}")
    _basal_sri("${tgz}" have)
    if(NOT have STREQUAL integrity)
      file(REMOVE "${tgz}")
    endif()
  endif()
  if(NOT EXISTS "${tgz}")
    message(STATUS "basal: npm pack ${name}@${version}")
    execute_process(
      COMMAND "${BASAL_NPM}" pack "${name}@${version}" --pack-destination "${dir}" --silent
      WORKING_DIRECTORY "${dir}" RESULT_VARIABLE rc ERROR_VARIABLE err)
    if(NOT rc EQUAL 0 OR NOT EXISTS "${tgz}")
      message(FATAL_ERROR "basal: `npm pack ${name}@${version}` failed (${rc}): ${err}")
    endif()
  endif()
  _basal_sri("${tgz}" got)
  if(NOT got STREQUAL integrity)
    file(REMOVE "${tgz}")
    message(FATAL_ERROR
      "basal: integrity mismatch for ${name}-${version}.tgz\n"
      "  pinned:   ${integrity}\n"
      "  received: ${got}\n"
      "The tarball was deleted. Refusing to build the worker's web globals from unverified sources.")
  endif()
  if(NOT EXISTS "${out}/package/package.json" OR "${tgz}" IS_NEWER_THAN "${out}/package/package.json")
    file(REMOVE_RECURSE "${out}")
    file(ARCHIVE_EXTRACT INPUT "${tgz}" DESTINATION "${out}")
  endif()
  set(BASAL_JS_PACKAGE_DIR_${name} "${out}/package" PARENT_SCOPE)
  # For the Debian copyright file (cmake/install.cmake): what is built into the worker.
  set_property(GLOBAL APPEND PROPERTY BASAL_JS_PACKAGES "${name}@${version}=${out}/package")
endfunction()

# The WHATWG URL Standard's reference implementation (jsdom's) and what it requires, at the versions
# its ranges resolve to today. tr46 requires "punycode/" (the package, not Node's built-in).
basal_js_package(whatwg-url 14.2.0
  "sha512-De72GdQZzNTUBBChsXueQUnPKDkg/5A5zp7pFDuQAj5UFoENpiACU0wlCvzpAGnTkj++ihpKwKyYewn/XNUbKw==")
basal_js_package(tr46 5.1.1
  "sha512-hdF5ZgjTqgAntKkklYw0R03MG2x/bSzTtkxmIRw/sTNV8YXsCJ1tfLAX23lhxhHJlEf3CRCOCGGWw3vI3GaSPw==")
basal_js_package(webidl-conversions 7.0.0
  "sha512-VwddBukDzu71offAQR975unBIGqfKZpM+8ZX6ySk8nYhVoo5CYaZyzt3YBvYtRtO+aoGlqxPg/B87NGVZ/fu6g==")
basal_js_package(punycode 2.3.1
  "sha512-vYt7UD1U9Wg6138shLtLOvdAu+8DsC/ilFtEVHcH+wydcSpNE20AfSOduf6MkRFahL5FY7X1oU7nKVZFtfq8Fg==")

# basal_js_bundle(NAME ENTRY <module id> [PACKAGES <name>...] [MODULES <id>=<file>...])
# Compiles the CommonJS modules that ENTRY reaches through require() among PACKAGES (by
# "name/path") and MODULES into one script with a minimal require, compiled by QuickJS and written
# as bytecode into
# ${CMAKE_CURRENT_BINARY_DIR}/js/NAME_bytecode.{h,cpp}, appended to the list in the variable NAME_SOURCES.
# The bytecode array is basal::worker::bytecode::k<NAME> (e.g. kweb_url) of size k<NAME>Size.
# basal_js_bundle(NAME SCRIPT <file>) compiles one file as it is, as one global script (no
# require, no bundling), into NAME_bytecode.h alone, which defines the array (NAME_SOURCES is that
# header): included by one file, among whose hot data it lies (every worker reads it).
function(basal_js_bundle name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "ENTRY;SCRIPT" "PACKAGES;MODULES")
  set(out_dir "${CMAKE_CURRENT_BINARY_DIR}/js")
  set(deps basal-js-bundle)
  if(arg_SCRIPT)
    set(args --name "${name}" --script "${arg_SCRIPT}" --out-dir "${out_dir}")
    list(APPEND deps "${arg_SCRIPT}")
  else()
    set(args --name "${name}" --entry "${arg_ENTRY}" --out-dir "${out_dir}")
  endif()
  foreach(pkg IN LISTS arg_PACKAGES)
    if(NOT DEFINED BASAL_JS_PACKAGE_DIR_${pkg})
      message(FATAL_ERROR "basal_js_bundle(${name}): package ${pkg} is not declared with basal_js_package")
    endif()
    set(pdir "${BASAL_JS_PACKAGE_DIR_${pkg}}")
    list(APPEND args --package "${pkg}=${pdir}")
    file(GLOB_RECURSE files "${pdir}/*.js" "${pdir}/*.json")
    list(APPEND deps ${files})
  endforeach()
  foreach(m IN LISTS arg_MODULES)
    list(APPEND args --module "${m}")
    string(REGEX REPLACE "^[^=]*=" "" file "${m}")
    list(APPEND deps "${file}")
  endforeach()
  if(arg_SCRIPT)
    set(outputs "${out_dir}/${name}_bytecode.h")
  else()
    set(outputs "${out_dir}/${name}_bytecode.cpp" "${out_dir}/${name}_bytecode.h")
  endif()
  add_custom_command(
    OUTPUT ${outputs}
    COMMAND basal-js-bundle ${args}
    DEPENDS ${deps}
    COMMENT "basal: compiling the ${name} bundle to QuickJS bytecode"
    VERBATIM)
  list(GET outputs 0 first)
  set(${name}_SOURCES "${first}" PARENT_SCOPE)
endfunction()
