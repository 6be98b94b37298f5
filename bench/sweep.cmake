# Included by bench/CMakeLists.txt: the MPI sweep's 2-rank speed-up (sweep_bench.sh, a shell
# script around mpiexec, so not a Google Benchmark program). Under ctest it runs as a smoke test
# on a small generated trace (2 policies x 2 rules x 4 windows), checking only that 1 and 2 ranks
# give the same --json; the real figure is taken by hand (replay/README.md, "Sweeps").
if(MLPRIO_HAVE_MPI AND MLPRIO_MPIEXEC AND MLPRIO_BUILD_TESTS)
  add_test(NAME bench_smoke:sweep_bench
           COMMAND ${CMAKE_COMMAND} -E env PATH=$<TARGET_FILE_DIR:mlprio-replay>:$ENV{PATH}
                   sh -c "mlprio-replay generate --model lublin --jobs 3000 --seed 5 -q -o \"$1\" && \"$0\" \"$2\" \"$1\" 4x500 fcfs,sjf 2"
                   ${CMAKE_CURRENT_LIST_DIR}/sweep_bench.sh
                   ${CMAKE_CURRENT_BINARY_DIR}/sweep_bench_trace.swf $<TARGET_FILE_DIR:mlprio-replay>)
  set_tests_properties(bench_smoke:sweep_bench PROPERTIES TIMEOUT 300 LABELS "bench;mpi"
                       RESOURCE_LOCK mpi_cores)
endif()
