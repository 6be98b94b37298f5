# Included by bench/CMakeLists.txt: resuming a sweep from its journal against computing it
# afresh (sweep_resume_bench.cpp; figure in RESULTS.md, "Sweep resume").
mlprio_add_benchmark(bench_sweep_resume ${CMAKE_CURRENT_LIST_DIR}/sweep_resume_bench.cpp)
target_link_libraries(bench_sweep_resume PRIVATE mlprio_replay_dist)
# The smoke run journals 10,000 fdatasync'd records per fresh sweep: on tmpfs when there is one,
# so that it takes seconds, not a minute, while other tests load the disk.
if(MLPRIO_BUILD_TESTS AND EXISTS /dev/shm)
  set_tests_properties(bench_smoke:bench_sweep_resume PROPERTIES ENVIRONMENT TMPDIR=/dev/shm)
endif()
