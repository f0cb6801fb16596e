# The sources of hal's Python extension (hal._hal): one list for the wheel's
# build (python/CMakeLists.txt) and the GPU check's (scripts/gpu-python/).
set(HAL_PYTHON_EXTENSION_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/src/module.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/collectives.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/masks.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/pending_work.cpp)
