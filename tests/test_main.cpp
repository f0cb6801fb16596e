#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#if defined(__SANITIZE_ADDRESS__)
#define HAL_TESTS_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HAL_TESTS_UNDER_ASAN 1
#endif
#endif

#ifdef HAL_TESTS_UNDER_ASAN
// The tests ask for impossible allocations and expect out_of_memory; by
// default AddressSanitizer aborts on those instead of failing them as the
// C library does.
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1"; }
#endif
