# core/src/model: features, model files, predictors (tree walker, formula) and the policy score.
# Included from core/CMakeLists.txt; adds nothing that needs XGBoost (training lives in model/).
target_sources(mlprio_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/features.cpp
  ${CMAKE_CURRENT_LIST_DIR}/model_file.cpp
  ${CMAKE_CURRENT_LIST_DIR}/predictor_xgboost.cpp
  ${CMAKE_CURRENT_LIST_DIR}/predictor_formula.cpp
  ${CMAKE_CURRENT_LIST_DIR}/score.cpp)
