# One INTERFACE target carries the project's warning flags; every target links it.
add_library(mlprio_warnings INTERFACE)
target_compile_options(mlprio_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX,C>:-Wall -Wextra -Wpedantic -Wshadow
    -Wcast-align -Wunused -Wdouble-promotion -Wformat=2 -Wimplicit-fallthrough>
  $<$<COMPILE_LANGUAGE:CXX>:-Wnon-virtual-dtor>
  # GCC 12 reports -Wrestrict false positives inside libstdc++'s std::string concatenation at -O2+
  # (GCC bug 105329); the code it points at is the standard library's, not ours.
  $<$<AND:$<CXX_COMPILER_ID:GNU>,$<COMPILE_LANGUAGE:CXX>>:-Wno-restrict>
  $<$<AND:$<BOOL:${MLPRIO_WERROR}>,$<COMPILE_LANGUAGE:CXX,C>>:-Werror>
  $<$<AND:$<BOOL:${MLPRIO_WERROR}>,$<COMPILE_LANGUAGE:CUDA>>:--Werror=all-warnings>)

# Sanitizer preset support: -DMLPRIO_SANITIZE=ON adds ASan + UBSan everywhere.
option(MLPRIO_SANITIZE "Build with AddressSanitizer and UndefinedBehaviorSanitizer" OFF)
if(MLPRIO_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()

# Thread sanitizer (the tsan preset, scripts/tsan): -DMLPRIO_SANITIZE_THREAD=ON. TSan cannot be
# combined with ASan, and only C/C++ are instrumented (the preset turns CUDA off).
option(MLPRIO_SANITIZE_THREAD "Build with ThreadSanitizer (not with MLPRIO_SANITIZE)" OFF)
if(MLPRIO_SANITIZE_THREAD)
  if(MLPRIO_SANITIZE)
    message(FATAL_ERROR "MLPRIO_SANITIZE_THREAD and MLPRIO_SANITIZE exclude each other "
                        "(ThreadSanitizer cannot run with AddressSanitizer)")
  endif()
  add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=thread>
                      $<$<COMPILE_LANGUAGE:C,CXX>:-fno-omit-frame-pointer>)
  add_link_options(-fsanitize=thread)
endif()

# MLPRIO_FUZZ (the asan preset): every library is instrumented for libFuzzer's coverage; only fuzz/ links the driver.
if(MLPRIO_FUZZ)
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()
