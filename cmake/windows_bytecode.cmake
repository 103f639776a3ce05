# cmake -DIN=host_bytecode.cpp -DOUT=copy.cpp -P windows_bytecode.cmake: the host build's bytecode
# array source, its 64 KiB alignment (a Linux page-cache layout) made 4 KiB, the largest a PE
# object file holds comfortably. Nothing else changes: the bytes are the same.
file(READ "${IN}" text)
string(REPLACE "alignas(65536)" "alignas(4096)" text "${text}")
if(text MATCHES "alignas\\(65536\\)")
  message(FATAL_ERROR "${IN}: the alignment was not rewritten")
endif()
file(WRITE "${OUT}" "${text}")
