# Unit tests of the host attention kernels; include() this from tests/CMakeLists.txt
# (needs the hal_host_attention target and Debian's doctest-dev).
find_package(doctest REQUIRED)
add_executable(attention_kernels_test ${CMAKE_CURRENT_LIST_DIR}/attention_kernels_test.cpp)
target_link_libraries(attention_kernels_test PRIVATE hal_host_attention doctest::doctest)
if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  target_compile_options(attention_kernels_test PRIVATE -Wall -Wextra)
endif()
add_test(NAME attention_kernels_test COMMAND attention_kernels_test)
