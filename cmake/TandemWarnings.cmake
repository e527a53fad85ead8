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

if(TANDEM_SANITIZE STREQUAL "address")
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
elseif(TANDEM_SANITIZE STREQUAL "thread")
  add_compile_options(-fsanitize=thread)
  add_link_options(-fsanitize=thread)
elseif(NOT TANDEM_SANITIZE STREQUAL "")
  message(FATAL_ERROR "TANDEM_SANITIZE must be '', 'address' or 'thread'")
endif()
