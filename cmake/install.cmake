# What `cmake --install` puts where, in the FHS places GNUInstallDirs names (the list, with the
# package's: docs/install.md), and the build step that makes what is installed beside the binaries
# (cmake/reference.cmake: man pages and completion scripts from basal's own command definitions,
# basal-manifest(5) from docs/manifest.md, the guides, the Debian changelog and copyright).
#
#   cmake --install build/release                       # PREFIX /usr/local
#   cmake --install build/release --prefix /opt/basal   # another; nothing installed depends on the
#                                                       # prefix configured, only on the one used
#   cpack --config build/release/CPackConfig.cmake      # the .deb, prefix /usr (cmake/package.cmake)
#
#   PREFIX/bin/basal
#   PREFIX/libexec/basal/ck-basal-worker        basal finds it from its own directory
#   PREFIX/share/man/man1/basal*.1.gz, man5/basal-manifest.5.gz
#   PREFIX/share/bash-completion/completions/basal, zsh/vendor-completions/_basal,
#   PREFIX/share/fish/vendor_completions.d/basal.fish
#   PREFIX/share/doc/basal/                     README, docs/, examples/, changelog.Debian.gz, copyright
#   PREFIX/lib/sysusers.d/basal.conf, PREFIX/lib/tmpfiles.d/basal.conf
#   /lib/systemd/system/basal.service, /etc/basal/serve.json      (PREFIX /usr; else under PREFIX)

# What running a flow needs, as one target (scripts/setup.sh --quick): one build schedules both
# binaries' trees together, where `--target basal ck-basal-worker` builds one after the other.
add_custom_target(basal_binaries)
add_dependencies(basal_binaries basal ck-basal-worker)

# Installing (and CPack) takes what was built and builds nothing: the package needs only basal,
# ck-basal-worker and basal_reference, not every test and benchmark of the build tree.
set(CMAKE_SKIP_INSTALL_ALL_DEPENDENCY TRUE)

find_package(Python3 COMPONENTS Interpreter)  # basal-manifest(5); without it the page is left out

set(BASAL_SYSTEMD_UNIT_DIR "" CACHE PATH
    "Where basal.service is installed (empty: /lib/systemd/system for the prefix /usr, else PREFIX/lib/systemd/system)")

# What the worker has built in, with the license file of each, for the copyright file.
set(_bundled "QuickJS ${_qjs_version} (npm qjsc@${BASAL_QJSC_VERSION}), in ck-basal-worker|MIT|${_qjs_src}/LICENSE")
get_property(_js_packages GLOBAL PROPERTY BASAL_JS_PACKAGES)
foreach(entry IN LISTS _js_packages)
  string(REGEX MATCH "^([^=]+)=(.*)$" _ "${entry}")
  set(_package "${CMAKE_MATCH_1}")
  set(_dir "${CMAKE_MATCH_2}")
  file(READ "${_dir}/package.json" _json)
  string(JSON _license GET "${_json}" license)
  file(GLOB _license_file "${_dir}/LICENSE*")
  if(NOT _license_file)
    message(FATAL_ERROR "basal: npm package ${_package} has no LICENSE file for the copyright file")
  endif()
  list(GET _license_file 0 _license_file)
  list(APPEND _bundled "npm ${_package}, in ck-basal-worker's web globals|${_license}|${_license_file}")
endforeach()
set(_inputs "${CMAKE_BINARY_DIR}/reference/inputs.cmake")
file(CONFIGURE OUTPUT "${_inputs}" CONTENT "set(BASAL_BUNDLED \"@_bundled@\")\n" @ONLY)

set(_reference "${CMAKE_BINARY_DIR}/reference")
file(GLOB _guides CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/docs/*.md")
add_custom_command(
  OUTPUT "${_reference}/stamp"
  COMMAND ${CMAKE_COMMAND} -DBASAL=$<TARGET_FILE:basal> -DSOURCE_DIR=${PROJECT_SOURCE_DIR} -DOUT=${_reference}
          -DVERSION=${PROJECT_VERSION} -DPYTHON=${Python3_EXECUTABLE} -DINPUTS=${_inputs}
          -P ${PROJECT_SOURCE_DIR}/cmake/reference.cmake
  DEPENDS basal ${_guides} "${_inputs}" "${PROJECT_SOURCE_DIR}/README.md" "${PROJECT_SOURCE_DIR}/cmake/reference.cmake"
          "${PROJECT_SOURCE_DIR}/packaging/man/markdown_to_man.py" "${PROJECT_SOURCE_DIR}/packaging/debian/changelog"
          "${PROJECT_SOURCE_DIR}/packaging/debian/copyright"
  COMMENT "basal: man pages, completions and guides (cmake/reference.cmake)"
  VERBATIM)
add_custom_target(basal_reference ALL DEPENDS "${_reference}/stamp")

# Installing builds nothing: say what to build when it was not.
install(CODE "
  foreach(_made IN ITEMS \"$<TARGET_FILE:basal>\" \"$<TARGET_FILE:ck-basal-worker>\" \"${_reference}/stamp\")
    if(NOT EXISTS \"\${_made}\")
      message(FATAL_ERROR \"basal: \${_made} is not built; first: cmake --build ${CMAKE_BINARY_DIR} --target basal ck-basal-worker basal_reference\")
    endif()
  endforeach()
")
install(TARGETS basal RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}")
install(TARGETS ck-basal-worker RUNTIME DESTINATION "${CMAKE_INSTALL_LIBEXECDIR}/basal")
install(DIRECTORY "${_reference}/man/" DESTINATION "${CMAKE_INSTALL_MANDIR}")
install(FILES "${_reference}/completions/basal" DESTINATION "${CMAKE_INSTALL_DATAROOTDIR}/bash-completion/completions")
install(FILES "${_reference}/completions/_basal" DESTINATION "${CMAKE_INSTALL_DATAROOTDIR}/zsh/vendor-completions")
install(FILES "${_reference}/completions/basal.fish" DESTINATION "${CMAKE_INSTALL_DATAROOTDIR}/fish/vendor_completions.d")
install(DIRECTORY "${_reference}/doc/" DESTINATION "${CMAKE_INSTALL_DOCDIR}")
install(FILES "${PROJECT_SOURCE_DIR}/packaging/debian/lintian-overrides" DESTINATION "${CMAKE_INSTALL_DATAROOTDIR}/lintian/overrides"
        RENAME basal)
install(DIRECTORY "${PROJECT_SOURCE_DIR}/examples/" DESTINATION "${CMAKE_INSTALL_DOCDIR}/examples"
        PATTERN embedding EXCLUDE)
# systemd reads sysusers.d and tmpfiles.d only under /usr/lib (and /etc, /run): from another
# prefix, docs/install.md names the files to systemd-sysusers and systemd-tmpfiles.
install(FILES "${PROJECT_SOURCE_DIR}/packaging/sysusers.d/basal.conf" DESTINATION lib/sysusers.d)
install(FILES "${PROJECT_SOURCE_DIR}/packaging/tmpfiles.d/basal.conf" DESTINATION lib/tmpfiles.d)
install(CODE "
  set(BASAL_SOURCE_DIR \"${PROJECT_SOURCE_DIR}\")
  set(BASAL_BUILD_DIR \"${CMAKE_BINARY_DIR}\")
  set(BASAL_UNIT_DIR \"${BASAL_SYSTEMD_UNIT_DIR}\")
  set(BASAL_INSTALL_BINDIR \"${CMAKE_INSTALL_BINDIR}\")
  include(\"${PROJECT_SOURCE_DIR}/cmake/install_system_files.cmake\")
")
