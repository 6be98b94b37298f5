# Included by bench/CMakeLists.txt: the CUDA kernels of kernels/ (only with CUDA). Checks every
# kernel against its CPU reference before timing (exit 1 on a wrong answer); without a GPU it
# prints why and exits 0, so its ctest smoke run passes on GPU-less machines.
if(TARGET mlprio_fsdp_cuda)
  execute_process(COMMAND git -C ${CMAKE_SOURCE_DIR} describe --always --dirty --abbrev=12
                  OUTPUT_VARIABLE _kernels_bench_commit OUTPUT_STRIP_TRAILING_WHITESPACE
                  ERROR_QUIET RESULT_VARIABLE _kernels_bench_rc)
  if(NOT _kernels_bench_rc EQUAL 0 OR _kernels_bench_commit STREQUAL "")
    set(_kernels_bench_commit "unknown")
  endif()
  mlprio_add_benchmark(bench_kernels ${CMAKE_CURRENT_LIST_DIR}/kernels_bench.cpp)
  target_link_libraries(bench_kernels PRIVATE mlprio_kernels mlprio_fsdp_cuda)
  target_compile_definitions(bench_kernels PRIVATE MLPRIO_BUILD_TYPE="${CMAKE_BUILD_TYPE}"
                             MLPRIO_GIT_COMMIT="${_kernels_bench_commit}")
endif()
