# AMPCHECK_SANITIZE=address,undefined builds every C++ file and link with those sanitizers
# (CUDA device code cannot be sanitized; its host side links the runtime like the rest).
# With clang, fuzzer-no-link adds libFuzzer's coverage instrumentation as well: the fuzz
# targets of fuzz/ link libFuzzer itself (AMPCHECK_FUZZ).
if(AMPCHECK_SANITIZE)
  string(REPLACE "," ";" _san_list "${AMPCHECK_SANITIZE}")
  foreach(_san IN LISTS _san_list)
    if(NOT _san MATCHES "^(address|undefined|leak|thread|fuzzer-no-link)$")
      message(FATAL_ERROR "AMPCHECK_SANITIZE: unknown sanitizer '${_san}' (use address, undefined, leak, thread or, with clang, fuzzer-no-link, comma separated)")
    endif()
  endforeach()
  set(_san_flags -fsanitize=${AMPCHECK_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:${_san_flags}>")
  add_link_options(${_san_flags})
  add_compile_definitions(AMPCHECK_SANITIZED=1)
endif()
