# tandem_target_defaults(target): warnings, -Werror in CI, sanitizers.
function(tandem_target_defaults target)
  # -Wno-missing-field-initializers: C++20 designated initializers leave
  # out fields that have default member initializers on purpose.
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers>)
  if(TANDEM_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
  endif()
endfunction()

# Fuzzing: every library is built with libFuzzer's coverage instrumentation
# and ASan+UBSan; only the fuzz targets link libFuzzer itself.
if(TANDEM_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "TANDEM_FUZZ=ON needs clang (libFuzzer), not ${CMAKE_CXX_COMPILER_ID}: configure with "
                        "-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ (tests/fuzz/run_fuzzers.sh does)")
  endif()
  if(TANDEM_SANITIZE STREQUAL "thread")
    message(FATAL_ERROR "TANDEM_FUZZ=ON uses ASan+UBSan; it cannot be combined with TANDEM_SANITIZE=thread")
  endif()
  set(TANDEM_SANITIZE address)
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()

# Undefined behaviour aborts (as a memory error does) instead of printing and
# going on, so a test or a fuzzer that hits it fails.
if(TANDEM_SANITIZE STREQUAL "address")
  add_compile_options(-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
elseif(TANDEM_SANITIZE STREQUAL "thread")
  add_compile_options(-fsanitize=thread)
  add_link_options(-fsanitize=thread)
elseif(NOT TANDEM_SANITIZE STREQUAL "")
  message(FATAL_ERROR "TANDEM_SANITIZE must be '', 'address' or 'thread'")
endif()
# GCC's flow analysis sees through the sanitizers' instrumentation poorly
# and warns of maybe-uninitialized values that are not (e.g. inside
# std::variant's move constructor, or KJ's ExceptionOr<absl::Status>); the
# sanitizers check the real ones.
# So it does through a unity batch (CMAKE_UNITY_BUILD), whose files' code
# it inlines further: it warned of values in KJ's kj::Own and
# ImmediatePromiseNode<std::string> there that are set. Clang's
# uninitialized-value warnings (-Wall; the ASan tree is clang's) still run.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND (NOT TANDEM_SANITIZE STREQUAL "" OR CMAKE_UNITY_BUILD))
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-Wno-maybe-uninitialized>)
endif()
