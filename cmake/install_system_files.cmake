# Installs what names absolute paths, at install time (install(CODE) in cmake/install.cmake), so
# that it follows the prefix of that install, not the one configured: `cmake --install --prefix
# DIR`, and the Debian package (CPack installs with the prefix /usr).
#   basal.service   into /lib/systemd/system for the prefix /usr (where Debian 12's packages put
#                   units), else PREFIX/lib/systemd/system; its ExecStart names PREFIX/bin/basal and
#                   the configuration in /etc (prefix /usr) or PREFIX/etc
#   basal/serve.json  the configuration, `{}` (every default), unless one is there already
# Set by the caller: BASAL_SOURCE_DIR, BASAL_BUILD_DIR, BASAL_UNIT_DIR (a cache value: empty for the default),
# BASAL_INSTALL_BINDIR (bin, relative to the prefix).

if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(_sysconf "/etc")
  set(_unit_dir "/lib/systemd/system")
else()
  set(_sysconf "${CMAKE_INSTALL_PREFIX}/etc")
  set(_unit_dir "${CMAKE_INSTALL_PREFIX}/lib/systemd/system")
endif()
if(BASAL_UNIT_DIR)
  set(_unit_dir "${BASAL_UNIT_DIR}")
endif()

set(BASAL_BINDIR "${CMAKE_INSTALL_PREFIX}/${BASAL_INSTALL_BINDIR}")
set(BASAL_SYSCONFDIR "${_sysconf}")
# Written for this prefix in the build tree, then installed like any file (file(INSTALL) adds
# DESTDIR, logs it and lists it in install_manifest.txt).
configure_file("${BASAL_SOURCE_DIR}/packaging/systemd/basal.service.in" "${BASAL_BUILD_DIR}/packaging/basal.service" @ONLY)
file(INSTALL "${BASAL_BUILD_DIR}/packaging/basal.service" DESTINATION "${_unit_dir}"
     FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)

# An administrator's configuration is never overwritten by a later install.
if(EXISTS "$ENV{DESTDIR}${_sysconf}/basal/serve.json")
  message(STATUS "Kept as it is: $ENV{DESTDIR}${_sysconf}/basal/serve.json")
else()
  file(INSTALL "${BASAL_SOURCE_DIR}/packaging/etc/serve.json" DESTINATION "${_sysconf}/basal"
       FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
endif()
