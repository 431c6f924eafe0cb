# Writes OUT, a C++ source defining `const std::string_view NAME` in namespace berth as the text of
# IN (agent/pull_script.h): cmake -DIN=... -DOUT=... -DNAME=... -DHEADER=... -P embed_text.cmake
file(READ "${IN}" text)
string(FIND "${text}" ")berth_text\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${IN} holds the raw string's delimiter")
endif()
set(body "// Generated from ${IN} by embed_text.cmake: do not edit.\n#include \"${HEADER}\"\n\nnamespace berth {\n\nconst std::string_view ${NAME} = R\"berth_text(${text})berth_text\";\n\n}  // namespace berth\n")
file(WRITE "${OUT}.tmp" "${body}")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
