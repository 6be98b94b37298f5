# Included by bench/CMakeLists.txt: throughput of the fsdp_profiler caching-allocator model.
mlprio_add_benchmark(bench_fsdp_allocator ${CMAKE_CURRENT_LIST_DIR}/fsdp_allocator_bench.cpp)
target_link_libraries(bench_fsdp_allocator PRIVATE mlprio_fsdp)
target_compile_definitions(bench_fsdp_allocator PRIVATE MLPRIO_BUILD_TYPE="${CMAKE_BUILD_TYPE}")
