# Included by bench/CMakeLists.txt: the replayer's throughput benchmark (replay_bench.cpp).
mlprio_add_benchmark(bench_replay ${CMAKE_CURRENT_LIST_DIR}/replay_bench.cpp)
target_link_libraries(bench_replay PRIVATE mlprio_replay)
target_compile_definitions(bench_replay PRIVATE MLPRIO_BUILD_TYPE="${CMAKE_BUILD_TYPE}")
