# The fake vendor libraries' common build; include()d by the files that add them.
include_guard(GLOBAL)

# `target` runs the fake libraries named after it, in pairs DEFINITION
# fake_target: each path is the compile definition, and each fake is built
# before the target.
function(hal_use_fake_libraries target)
  set(pairs ${ARGN})
  while(pairs)
    list(POP_FRONT pairs definition library)
    target_compile_definitions(${target} PRIVATE ${definition}="$<TARGET_FILE:${library}>")
    add_dependencies(${target} ${library})
  endwhile()
endfunction()

# A fake of a vendor library from one source under tests/fakes, named as the
# real one (lib<name><suffix>) alone in `directory`, so that the backends find
# it by their normal search; only its exports are visible, and it is never
# installed. Further arguments are compile definitions (a variant of the source).
function(hal_add_fake_library target source name suffix directory)
  add_library(${target} SHARED ${PROJECT_SOURCE_DIR}/tests/fakes/${source})
  set_target_properties(${target} PROPERTIES
    OUTPUT_NAME ${name} PREFIX lib SUFFIX ${suffix}
    LIBRARY_OUTPUT_DIRECTORY ${directory}
    CXX_VISIBILITY_PRESET hidden)
  target_link_libraries(${target} PRIVATE hal_warnings)
  if(ARGN)
    target_compile_definitions(${target} PRIVATE ${ARGN})
  endif()
endfunction()
