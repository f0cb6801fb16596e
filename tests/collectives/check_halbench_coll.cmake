# Runs `halbench coll` (HALBENCH) with ARGS (a ;-list holding --json and
# --no-mpi) on RANKS ranks under halrun (HALRUN) and checks rank 0's JSON:
# exit status 0, schema hal.bench/1, benchmark coll, RANKS ranks, one result
# per size of EXPECTED_SIZES in that order, and in every result both
# placements timed with #wrong 0, the Gloo baseline timed and MPI's null.
# Run with cmake -P.
execute_process(COMMAND ${HALRUN} -n ${RANKS} -- ${HALBENCH} coll ${ARGS}
                RESULT_VARIABLE status OUTPUT_VARIABLE output ERROR_VARIABLE errors)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "halrun -n ${RANKS} -- halbench coll ${ARGS} exited with ${status}:\n${output}\n${errors}")
endif()
# halrun starts every line with "[RANK] "; rank 0 prints the document.
string(REGEX REPLACE "(^|\n)\\[[1-9][0-9]*\\] [^\n]*" "" document "${output}")
string(REGEX REPLACE "(^|\n)\\[0\\] " "\\1" document "${document}")

function(expect key_path expected)
  string(JSON value ERROR_VARIABLE json_error GET "${document}" ${key_path})
  if(json_error OR NOT value STREQUAL expected)
    message(FATAL_ERROR "${key_path}: expected '${expected}', got '${value}' ${json_error}:\n${document}")
  endif()
endfunction()

function(expect_positive key_path)
  string(JSON value ERROR_VARIABLE json_error GET "${document}" ${key_path})
  if(json_error OR NOT value GREATER 0)
    message(FATAL_ERROR "${key_path}: expected a number above 0, got '${value}' ${json_error}:\n${document}")
  endif()
endfunction()

expect("schema" "hal.bench/1")
expect("benchmark" "coll")
expect("parameters;ranks" "${RANKS}")
string(JSON rows ERROR_VARIABLE json_error LENGTH "${document}" results)
list(LENGTH EXPECTED_SIZES expected_rows)
if(json_error OR NOT rows EQUAL expected_rows)
  message(FATAL_ERROR "expected ${expected_rows} results (sizes ${EXPECTED_SIZES}), got '${rows}' ${json_error}:\n${document}")
endif()
math(EXPR last "${rows} - 1")
foreach(index RANGE ${last})
  list(GET EXPECTED_SIZES ${index} size)
  expect("results;${index};size" "${size}")
  foreach(place out_of_place in_place)
    expect("results;${index};${place};wrong" "0")
    expect_positive("results;${index};${place};time_us")
  endforeach()
  expect_positive("results;${index};gloo;time_us")
  string(JSON mpi TYPE "${document}" results ${index} mpi)
  if(NOT mpi STREQUAL "NULL")
    message(FATAL_ERROR "results[${index}].mpi is ${mpi}, expected null under --no-mpi:\n${document}")
  endif()
endforeach()
