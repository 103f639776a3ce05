# QuickJS from the npm package qjsc@${BASAL_QJSC_VERSION}: fetched with `npm pack` into the build
# tree, its sha512 integrity checked against the value pinned here, and only the core engine built
# (never quickjs-libc: the worker offers no std/os modules). No QuickJS source is committed.

set(BASAL_QJSC_VERSION "0.3.0")
# As `npm view qjsc@0.3.0 dist.integrity` prints it.
set(BASAL_QJSC_INTEGRITY
    "sha512-a7+cU6/IVcZbIejffdt/wZVMX6LL2MDL3HQ9Zb5Gm23G9DvBMS/z9GHFxz39bAvp2PvMOM+ypSOAyokt2DdZ2w==")
set(BASAL_QJSC_TARBALL "" CACHE FILEPATH
    "A local qjsc-${BASAL_QJSC_VERSION}.tgz to use instead of `npm pack` (still integrity-checked)")

set(_qjs_dir "${CMAKE_BINARY_DIR}/_deps/qjsc")
set(_qjs_tgz "${_qjs_dir}/qjsc-${BASAL_QJSC_VERSION}.tgz")
file(MAKE_DIRECTORY "${_qjs_dir}")

find_program(BASAL_NODE node)
find_program(BASAL_NPM npm)
if(NOT BASAL_NODE OR NOT BASAL_NPM)
  message(FATAL_ERROR "basal: node and npm are needed to fetch QuickJS (npm pack qjsc@${BASAL_QJSC_VERSION}); "
                      "install them with: apt-get install -y nodejs npm")
endif()

function(_basal_sri file out_var)
  execute_process(
    COMMAND "${BASAL_NODE}" -e
      "const c=require('crypto'),f=require('fs');process.stdout.write('sha512-'+c.createHash('sha512').update(f.readFileSync(process.argv[1])).digest('base64'))"
      "${file}"
    OUTPUT_VARIABLE _sri RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "basal: could not hash ${file} with node")
  endif()
  set(${out_var} "${_sri}" PARENT_SCOPE)
endfunction()

if(BASAL_QJSC_TARBALL)
  configure_file("${BASAL_QJSC_TARBALL}" "${_qjs_tgz}" COPYONLY)
endif()
if(EXISTS "${_qjs_tgz}")
  _basal_sri("${_qjs_tgz}" _have)
  if(NOT _have STREQUAL BASAL_QJSC_INTEGRITY)
    file(REMOVE "${_qjs_tgz}")
  endif()
endif()
if(NOT EXISTS "${_qjs_tgz}")
  message(STATUS "basal: npm pack qjsc@${BASAL_QJSC_VERSION}")
  execute_process(
    COMMAND "${BASAL_NPM}" pack "qjsc@${BASAL_QJSC_VERSION}" --pack-destination "${_qjs_dir}" --silent
    WORKING_DIRECTORY "${_qjs_dir}" RESULT_VARIABLE _rc ERROR_VARIABLE _err)
  if(NOT _rc EQUAL 0 OR NOT EXISTS "${_qjs_tgz}")
    message(FATAL_ERROR "basal: `npm pack qjsc@${BASAL_QJSC_VERSION}` failed (${_rc}): ${_err}")
  endif()
endif()
_basal_sri("${_qjs_tgz}" _got)
if(NOT _got STREQUAL BASAL_QJSC_INTEGRITY)
  file(REMOVE "${_qjs_tgz}")
  message(FATAL_ERROR
    "basal: integrity mismatch for qjsc-${BASAL_QJSC_VERSION}.tgz\n"
    "  pinned:   ${BASAL_QJSC_INTEGRITY}\n"
    "  received: ${_got}\n"
    "The tarball was deleted. Refusing to build QuickJS from unverified sources.")
endif()

set(_qjs_src "${_qjs_dir}/package/deps/quickjs_2021_03_27")
if(NOT EXISTS "${_qjs_src}/quickjs.c" OR "${_qjs_tgz}" IS_NEWER_THAN "${_qjs_src}/quickjs.c")
  file(REMOVE_RECURSE "${_qjs_dir}/package")
  file(ARCHIVE_EXTRACT INPUT "${_qjs_tgz}" DESTINATION "${_qjs_dir}"
       PATTERNS "package/deps/quickjs_2021_03_27/*")
endif()
file(READ "${_qjs_src}/VERSION" _qjs_version)
string(STRIP "${_qjs_version}" _qjs_version)
if(NOT _qjs_version STREQUAL "2021-03-27")
  message(FATAL_ERROR "basal: qjsc@${BASAL_QJSC_VERSION} holds QuickJS ${_qjs_version}, expected 2021-03-27")
endif()

add_library(basal_quickjs STATIC
  "${_qjs_src}/quickjs.c" "${_qjs_src}/libregexp.c" "${_qjs_src}/libunicode.c"
  "${_qjs_src}/cutils.c" "${_qjs_src}/libbf.c")
target_compile_definitions(basal_quickjs PRIVATE _GNU_SOURCE CONFIG_VERSION="2021-03-27"
                           PUBLIC CONFIG_BIGNUM)
# With function and data sections the worker's link drops what nothing calls: the worker's image
# size sets most of an idle worker's resident set (docs/performance.md).
target_compile_options(basal_quickjs PRIVATE -w -fwrapv -ffunction-sections -fdata-sections)
target_include_directories(basal_quickjs SYSTEM PUBLIC "${_qjs_src}")
target_link_libraries(basal_quickjs PRIVATE m)
set_target_properties(basal_quickjs PROPERTIES POSITION_INDEPENDENT_CODE ON)
