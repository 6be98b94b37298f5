# Included by bench/CMakeLists.txt: bench_easy_floor (easy_floor.cpp), the least an FCFS+EASY
# replay must do over the same reader, as a lower bound for the replay/awk goal. Under
# ctest it must give `mlprio-replay run`'s mean wait, mean bounded slowdown and longest wait on a
# generated trace, so the bound is a bound on the same schedule; with --metrics (the engine's
# metric accumulator added) also its p95/p99 waits and worst user.
add_executable(bench_easy_floor ${CMAKE_CURRENT_LIST_DIR}/easy_floor.cpp)
target_link_libraries(bench_easy_floor PRIVATE mlprio_replay mlprio_core mlprio_warnings)
if(MLPRIO_BUILD_TESTS AND TARGET mlprio-replay)
  add_test(NAME bench_smoke:easy_floor_agrees
           COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/easy_floor_check.sh
                   $<TARGET_FILE:mlprio-replay> $<TARGET_FILE:bench_easy_floor>
                   ${CMAKE_CURRENT_BINARY_DIR}/easy_floor_trace.swf)
  set_tests_properties(bench_smoke:easy_floor_agrees PROPERTIES TIMEOUT 300 LABELS bench)
endif()
