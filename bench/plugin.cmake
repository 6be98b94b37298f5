# Benchmarks of the Slurm plugin's C ABI (site_factor_p_set and an update over 10,000 jobs).
# The sbatch latency comparison on a real cluster is bench/plugin_sbatch_latency.sh.
if(TARGET mlprio_plugin_abi)
  mlprio_add_benchmark(bench_plugin_abi ${CMAKE_CURRENT_LIST_DIR}/plugin_abi_bench.cpp)
  target_link_libraries(bench_plugin_abi PRIVATE mlprio_plugin_abi)
endif()
