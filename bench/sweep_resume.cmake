# Included by bench/CMakeLists.txt: resuming a sweep from its journal against computing it
# afresh (sweep_resume_bench.cpp; figure in RESULTS.md, "Sweep resume").
mlprio_add_benchmark(bench_sweep_resume ${CMAKE_CURRENT_LIST_DIR}/sweep_resume_bench.cpp)
target_link_libraries(bench_sweep_resume PRIVATE mlprio_replay_dist)
