# The configuration-file part of libhal, included by hal/CMakeLists.txt, which
# also lists topology.cpp and links hwloc itself.
#   HAL_CORE_EXTRA_SOURCES: sources to add to the hal target
#   HAL_CORE_EXTRA_LIBS:    libraries to link privately (no public header includes them)

if(NOT TARGET PkgConfig::TOMLPLUSPLUS)
  find_package(PkgConfig REQUIRED)
  pkg_check_modules(TOMLPLUSPLUS REQUIRED IMPORTED_TARGET tomlplusplus>=3)
endif()

list(APPEND HAL_CORE_EXTRA_SOURCES ${CMAKE_CURRENT_LIST_DIR}/config.cpp)
list(APPEND HAL_CORE_EXTRA_LIBS PkgConfig::TOMLPLUSPLUS)
