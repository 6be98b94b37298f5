# Included by bench/CMakeLists.txt: the generator's user-model calibration table
# (user_calibration.sh, a shell script around mlprio-replay). Under ctest it runs as a smoke test
# with one seed per generated row (it prints SKIP and passes where ../shared/data is absent); the
# table in replay/README.md is taken with 10 seeds by hand.
if(MLPRIO_BUILD_TESTS AND TARGET mlprio-replay)
  add_test(NAME bench_smoke:user_calibration
           COMMAND ${CMAKE_COMMAND} -E env B=$<TARGET_FILE_DIR:mlprio-replay>
                   ${CMAKE_CURRENT_LIST_DIR}/user_calibration.sh
                   ${CMAKE_CURRENT_BINARY_DIR}/user_calibration 1)
  set_tests_properties(bench_smoke:user_calibration PROPERTIES TIMEOUT 300 LABELS bench)
endif()
