# The Debian package, built by CPack from the install rules (cmake/install.cmake):
#
#   cmake --build build/release -j2 --target basal ck-basal-worker basal_reference
#   (cd build/release && cpack -G DEB)        # -> build/release/basal_0.1.0-1_amd64.deb
#
# scripts/package-test.sh builds it, installs it, uses it and removes it (docs/install.md).
# Depends: what dpkg-shlibdeps finds the binaries need, and a way to create system users.
# Maintainer scripts (packaging/debian/): postinst creates the users and directories and never
# enables or starts basal.service; prerm stops it on removal; postrm purges its state.
# The version is the project's with the Debian revision of packaging/debian/changelog's newest
# entry, which must be for this version (tests/package: package_changelog_test).

file(STRINGS "${PROJECT_SOURCE_DIR}/packaging/debian/changelog" _top LIMIT_COUNT 1)
if(NOT _top MATCHES "^basal \\(([^)-]+)-([^)]+)\\) ")
  message(FATAL_ERROR "basal: packaging/debian/changelog must start with `basal (VERSION-REVISION) ...`: ${_top}")
endif()
set(BASAL_DEBIAN_UPSTREAM "${CMAKE_MATCH_1}")
set(BASAL_DEBIAN_REVISION "${CMAKE_MATCH_2}")
if(NOT BASAL_DEBIAN_UPSTREAM STREQUAL PROJECT_VERSION)
  message(WARNING "basal: packaging/debian/changelog's newest entry is for ${BASAL_DEBIAN_UPSTREAM}, the project "
                  "is ${PROJECT_VERSION}: add an entry (dch -v ${PROJECT_VERSION}-1) before building the package")
endif()

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME basal)
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_PACKAGE_CONTACT "basal maintainers <maintainers@basal.invalid>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "run untrusted JavaScript flows confined, every host call checked and journaled")
# Debian's extended description: lines of at most 79 characters.
string(CONCAT CPACK_PACKAGE_DESCRIPTION
    "basal runs untrusted JavaScript flows in a confined worker process\n"
    "(ck-basal-worker: QuickJS under seccomp and Landlock); its parent checks every\n"
    "host call a flow makes against the flow's manifest and journals it in SQLite\n"
    "before answering. basal serve runs approved flows for an HTTP API, signed\n"
    "webhooks and cron schedules (basal.service, installed but not enabled);\n"
    "basal mcp serves codemode for AI agents over MCP.")
# The install rules write /etc and /lib/systemd/system for the prefix /usr: CPack installs with
# DESTDIR into its staging tree, keeping the absolute paths.
set(CPACK_SET_DESTDIR ON)
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)

set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # basal_VERSION-REVISION_ARCH.deb
set(CPACK_DEBIAN_PACKAGE_RELEASE "${BASAL_DEBIAN_REVISION}")
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# postinst creates the users with systemd-sysusers from the shipped sysusers.d file, or else adduser.
set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser | systemd-sysusers")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "bash-completion")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    "${PROJECT_SOURCE_DIR}/packaging/debian/postinst" "${PROJECT_SOURCE_DIR}/packaging/debian/prerm"
    "${PROJECT_SOURCE_DIR}/packaging/debian/postrm" "${PROJECT_SOURCE_DIR}/packaging/debian/conffiles")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

include(CPack)
