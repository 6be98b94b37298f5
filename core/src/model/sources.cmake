# core/src/model: features, model files, predictors (tree walker, formula) and the policy score.
# Included from core/CMakeLists.txt; adds nothing that needs XGBoost (training lives in model/).
target_sources(mlprio_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/features.cpp
  ${CMAKE_CURRENT_LIST_DIR}/model_file.cpp
  ${CMAKE_CURRENT_LIST_DIR}/predictor_xgboost.cpp
  ${CMAKE_CURRENT_LIST_DIR}/predictor_formula.cpp
  ${CMAKE_CURRENT_LIST_DIR}/policy_params.cpp
  ${CMAKE_CURRENT_LIST_DIR}/score.cpp
  ${CMAKE_CURRENT_LIST_DIR}/fsdp_table.cpp)
# The AVX2 batch tree walker, chosen at run time by predictor_xgboost.cpp: -mavx2 on this file only.
target_sources(mlprio_core PRIVATE ${CMAKE_CURRENT_LIST_DIR}/tree_walk_avx2.cpp)
# (On other processors the file compiles to nothing and the scalar walker is used.)
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|i[3-6]86)$")
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/tree_walk_avx2.cpp PROPERTIES COMPILE_OPTIONS -mavx2)
endif()
# The LLM advisor needs libcurl; without it the advisor is simply not built.
if(CURL_FOUND)
  # libcurl's header only: the library is opened on first use (curl_api.hpp), so no process
  # that never starts an advisor maps it.
  # One concern a file; what they share is the private llm_internal.hpp.
  target_sources(mlprio_core PRIVATE ${CMAKE_CURRENT_LIST_DIR}/llm_prompt.cpp
                                     ${CMAKE_CURRENT_LIST_DIR}/llm_answer.cpp
                                     ${CMAKE_CURRENT_LIST_DIR}/llm_transport.cpp
                                     ${CMAKE_CURRENT_LIST_DIR}/llm_client.cpp
                                     ${CMAKE_CURRENT_LIST_DIR}/llm_advisor.cpp
                                     ${CMAKE_CURRENT_LIST_DIR}/llm_chat.cpp
                                     ${CMAKE_CURRENT_LIST_DIR}/curl_api.cpp)
  target_include_directories(mlprio_core PRIVATE
                             $<TARGET_PROPERTY:CURL::libcurl,INTERFACE_INCLUDE_DIRECTORIES>)
  target_link_libraries(mlprio_core PRIVATE ${CMAKE_DL_LIBS})
  target_compile_definitions(mlprio_core PUBLIC MLPRIO_HAVE_CURL=1)
endif()
