# core/src/model: features, model files, predictors (tree walker, formula) and the policy score.
# Included from core/CMakeLists.txt; adds nothing that needs XGBoost (training lives in model/).
target_sources(mlprio_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/features.cpp
  ${CMAKE_CURRENT_LIST_DIR}/model_file.cpp
  ${CMAKE_CURRENT_LIST_DIR}/predictor_xgboost.cpp
  ${CMAKE_CURRENT_LIST_DIR}/predictor_formula.cpp
  ${CMAKE_CURRENT_LIST_DIR}/score.cpp)
# The LLM advisor (issue #5) needs libcurl; without it the advisor is simply not built.
if(CURL_FOUND)
  target_sources(mlprio_core PRIVATE ${CMAKE_CURRENT_LIST_DIR}/llm_advisor.cpp)
  target_link_libraries(mlprio_core PRIVATE CURL::libcurl)
  target_compile_definitions(mlprio_core PUBLIC MLPRIO_HAVE_CURL=1)
endif()
