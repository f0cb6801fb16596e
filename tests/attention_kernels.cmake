# Unit tests of the host attention kernels; include() this from tests/CMakeLists.txt
# (needs the hal_host_attention target and Debian's doctest-dev).
find_package(doctest REQUIRED)
add_executable(attention_kernels_test ${CMAKE_CURRENT_LIST_DIR}/attention_kernels_test.cpp)
target_link_libraries(attention_kernels_test PRIVATE hal_host_attention doctest::doctest)
if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  target_compile_options(attention_kernels_test PRIVATE -Wall -Wextra)
endif()
add_test(NAME attention_kernels_test COMMAND attention_kernels_test)

# The same tests with the system's OpenMP runtime loaded first (as PyTorch
# loads one): the kernels then run on the main thread's OpenMP team.
add_executable(attention_kernels_openmp_test ${CMAKE_CURRENT_LIST_DIR}/attention_kernels_test.cpp)
target_link_libraries(attention_kernels_openmp_test PRIVATE hal_host_attention doctest::doctest ${CMAKE_DL_LIBS})
target_compile_definitions(attention_kernels_openmp_test PRIVATE HAL_TEST_ON_OPENMP_TEAM=1)
if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  target_compile_options(attention_kernels_openmp_test PRIVATE -Wall -Wextra)
endif()
add_test(NAME attention_kernels_openmp_test COMMAND attention_kernels_openmp_test)
