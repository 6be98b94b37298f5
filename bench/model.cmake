# bench_model: prediction and score benchmarks of core/src/model (needs mlprio-model's training
# library to build the model it times, hence XGBoost).
if(TARGET mlprio_model_tool OR MLPRIO_HAVE_XGBOOST)
  mlprio_add_benchmark(bench_model ${CMAKE_CURRENT_LIST_DIR}/model_bench.cpp)
  target_link_libraries(bench_model PRIVATE mlprio_model_tool)
  target_include_directories(bench_model PRIVATE ${CMAKE_SOURCE_DIR}/tests/model)
  target_compile_definitions(bench_model PRIVATE MLPRIO_BUILD_TYPE="${CMAKE_BUILD_TYPE}")
endif()
