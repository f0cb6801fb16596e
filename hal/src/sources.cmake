# Topology (hwloc) and configuration file (TOML++) parts of libhal.
#
# Include from the top-level CMakeLists.txt, then:
#   target_sources(hal PRIVATE ${HAL_CORE_EXTRA_SOURCES})
#   target_link_libraries(hal PRIVATE ${HAL_CORE_EXTRA_LIBS})
# Both libraries stay private: no public hal header includes them.

find_package(PkgConfig REQUIRED)
pkg_check_modules(HWLOC REQUIRED IMPORTED_TARGET hwloc>=2.1)  # 2.1: hwloc_topology_set_components

# Prefer the compiled TOML++ library; a header-only install works too, at the
# cost of a slower compile of config.cpp.
pkg_check_modules(TOMLPLUSPLUS IMPORTED_TARGET tomlplusplus>=3)
if(TOMLPLUSPLUS_FOUND)
  set(HAL_TOML_TARGET PkgConfig::TOMLPLUSPLUS)
else()
  find_path(HAL_TOMLPLUSPLUS_INCLUDE_DIR toml++/toml.h)
  if(NOT HAL_TOMLPLUSPLUS_INCLUDE_DIR)
    message(FATAL_ERROR "TOML++ not found: install libtomlplusplus-dev (Debian/Ubuntu) or tomlplusplus-devel, "
                        "or set CMAKE_PREFIX_PATH to a TOML++ 3.x install")
  endif()
  add_library(hal_tomlplusplus_header_only INTERFACE)
  target_include_directories(hal_tomlplusplus_header_only SYSTEM INTERFACE ${HAL_TOMLPLUSPLUS_INCLUDE_DIR})
  target_compile_definitions(hal_tomlplusplus_header_only INTERFACE TOML_HEADER_ONLY=1)
  set(HAL_TOML_TARGET hal_tomlplusplus_header_only)
endif()

set(HAL_CORE_EXTRA_SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/topology.cpp
    ${CMAKE_CURRENT_LIST_DIR}/config.cpp)
set(HAL_CORE_EXTRA_LIBS PkgConfig::HWLOC ${HAL_TOML_TARGET})
