# Makes, at build time, what is installed beside the binaries (the target basal_reference,
# cmake/install.cmake), into OUT:
#   man/man1/basal.1.gz, basal-COMMAND.1.gz   `basal __generate man`: from basal's own definitions
#   man/man5/basal-manifest.5.gz              docs/manifest.md (packaging/man/markdown_to_man.py)
#   completions/basal, _basal, basal.fish     `basal __generate bash|zsh|fish`
#   doc/README.md, doc/docs/*.md              the guides; those over 4 KiB gzipped, as Debian does
#   doc/changelog.Debian.gz, doc/copyright    packaging/debian/: the changelog, and the copyright
#                                             with the licenses of what the worker has built in
# Everything is made anew each time, so a command removed from basal leaves no page behind.
# Inputs: BASAL, SOURCE_DIR, OUT, VERSION, PYTHON (may be empty), INPUTS (a file of set() lines
# written at configure time: BASAL_BUNDLED, the bundled components and their license files).

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " command "${ARGN}")
    message(FATAL_ERROR "basal: `${command}` failed (${rc}): ${err}")
  endif()
endfunction()

function(gzip_file file)
  run(gzip -9nf "${file}")  # -n: no name or time inside, so the same input gives the same bytes
endfunction()

include("${INPUTS}")
file(REMOVE_RECURSE "${OUT}/man" "${OUT}/completions" "${OUT}/doc")
file(MAKE_DIRECTORY "${OUT}/man/man1" "${OUT}/man/man5" "${OUT}/completions" "${OUT}/doc/docs")

# Man pages.
run("${BASAL}" __generate man --out "${OUT}/man/man1")
if(PYTHON)
  run("${PYTHON}" "${SOURCE_DIR}/packaging/man/markdown_to_man.py" "${SOURCE_DIR}/docs/manifest.md"
      --name basal-manifest --section 5 --version "${VERSION}"
      --summary "a basal flow's manifest: the host calls it is granted, and its budgets"
      --out "${OUT}/man/man5/basal-manifest.5")
else()
  message(WARNING "basal: no python3, so basal-manifest(5) is not made (apt-get install python3)")
endif()
file(GLOB pages "${OUT}/man/man1/*.1" "${OUT}/man/man5/*.5")
foreach(page IN LISTS pages)
  gzip_file("${page}")
endforeach()

# Completion scripts.
foreach(shell_file IN ITEMS "bash=basal" "zsh=_basal" "fish=basal.fish")
  string(REPLACE "=" ";" pair "${shell_file}")
  list(GET pair 0 shell)
  list(GET pair 1 name)
  run("${BASAL}" __generate ${shell} OUTPUT_FILE "${OUT}/completions/${name}")
endforeach()

# The guides.
file(GLOB guides "${SOURCE_DIR}/docs/*.md")
file(COPY "${SOURCE_DIR}/README.md" DESTINATION "${OUT}/doc")
file(COPY ${guides} DESTINATION "${OUT}/doc/docs")
file(GLOB_RECURSE copied "${OUT}/doc/*.md")
foreach(file IN LISTS copied)
  file(SIZE "${file}" size)
  if(size GREATER 4096)
    gzip_file("${file}")
  endif()
endforeach()

# The Debian changelog, and the copyright file with the license of each bundled component.
configure_file("${SOURCE_DIR}/packaging/debian/changelog" "${OUT}/doc/changelog.Debian" COPYONLY)
gzip_file("${OUT}/doc/changelog.Debian")
file(READ "${SOURCE_DIR}/packaging/debian/copyright" copyright)
foreach(entry IN LISTS BASAL_BUNDLED)
  # "what|license|file": DEP-5 puts the license's text under its name, each line indented by one
  # space and an empty line written as " .".
  string(REPLACE "|" ";" parts "${entry}")
  list(GET parts 0 what)
  list(GET parts 1 license)
  list(GET parts 2 text_file)
  file(READ "${text_file}" text)
  string(STRIP "${text}" text)
  string(REGEX REPLACE "\n[ \t]*\n" "\n.\n" text "${text}")
  string(REGEX REPLACE "\n[ \t]*\n" "\n.\n" text "${text}")
  string(REPLACE "\n" "\n " text "${text}")
  string(APPEND copyright "\nFiles: ${what}\nCopyright: as its license text below says\nLicense: ${license}\n ${text}\n")
endforeach()
file(WRITE "${OUT}/doc/copyright" "${copyright}")
file(TOUCH "${OUT}/stamp")
