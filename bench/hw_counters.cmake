# Included by bench/CMakeLists.txt: bench_hw_counters (hw_counters.cpp), a command's hardware
# counters from perf_event_open (Linux only), for bench/replay_speed_ratios.sh with HW_COUNTERS=1.
# Under ctest it must pass the command's exit status and signal through and either print the
# counters or say that this machine has none.
if(CMAKE_SYSTEM_NAME STREQUAL "Linux")
  add_executable(bench_hw_counters ${CMAKE_CURRENT_LIST_DIR}/hw_counters.cpp)
  target_link_libraries(bench_hw_counters PRIVATE mlprio_warnings)
  if(MLPRIO_BUILD_TESTS)
    add_test(NAME bench_smoke:hw_counters
             COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/hw_counters_check.sh
                     $<TARGET_FILE:bench_hw_counters>)
    set_tests_properties(bench_smoke:hw_counters PROPERTIES TIMEOUT 60 LABELS bench)
  endif()
endif()
