# Runs `halbench attn` (HALBENCH, ARGS: a ;-list) and checks its JSON: exit
# status 0, schema hal.bench/1, an FMA peak and a host memcpy bandwidth
# above zero, and for every row a positive time, TFLOP/s, FLOP count, K/V
# bytes, kv GB/s and kv/memcpy, and a query length (seq_q; the key length
# is seq). Optional:
#   EXPECTED_SHAPES  ;-list of seq_q:seq_kv; every one has EXPECTED_ROWS /
#                    (number of shapes) rows and no row has another shape
#   EXPECTED_FLOPS   ;-list of seq_q:seq_kv:direction:flops that every row of
#                    that shape and direction must report
# Run with cmake -P.
cmake_minimum_required(VERSION 3.22)  # the project's: if(IN_LIST)
execute_process(COMMAND ${HALBENCH} ${ARGS} RESULT_VARIABLE status OUTPUT_VARIABLE output ERROR_VARIABLE errors)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "halbench ${ARGS} exited with ${status}:\n${errors}")
endif()
string(JSON schema ERROR_VARIABLE json_error GET "${output}" schema)
if(json_error OR NOT schema STREQUAL "hal.bench/1")
  message(FATAL_ERROR "expected schema hal.bench/1, got '${schema}' ${json_error}:\n${output}")
endif()
string(JSON peak GET "${output}" fma_peak all_threads_gflops)
if(NOT peak GREATER 0)
  message(FATAL_ERROR "FMA peak ${peak} is not above zero")
endif()
string(JSON memcpy_gbps ERROR_VARIABLE json_error GET "${output}" memcpy gbps)
if(json_error OR NOT memcpy_gbps GREATER 0)
  message(FATAL_ERROR "memcpy.gbps is '${memcpy_gbps}' ${json_error}, expected > 0:\n${output}")
endif()
string(JSON rows LENGTH "${output}" results)
if(NOT rows EQUAL EXPECTED_ROWS)
  message(FATAL_ERROR "expected ${EXPECTED_ROWS} result rows, got ${rows}:\n${output}")
endif()
set(seen_shapes "")
set(seen_rows "")
math(EXPR last "${rows} - 1")
# An EXPECTED_FLOPS entry "seq_q:seq:direction:flops" as want_seq_q, want_seq,
# want_direction and want_flops.
macro(parse_expected_flops entry)
  string(REPLACE ":" ";" fields "${entry}")
  list(GET fields 0 want_seq_q)
  list(GET fields 1 want_seq)
  list(GET fields 2 want_direction)
  list(GET fields 3 want_flops)
endmacro()

foreach(index RANGE ${last})
  foreach(key ms_per_call tflops flops peak_extra_bytes kv_bytes kv_gbps kv_over_memcpy seq_q seq)
    string(JSON value ERROR_VARIABLE json_error GET "${output}" results ${index} ${key})
    if(json_error OR NOT value GREATER 0)
      message(FATAL_ERROR "results[${index}].${key} is '${value}' ${json_error}, expected > 0:\n${output}")
    endif()
  endforeach()
  string(JSON seq_q GET "${output}" results ${index} seq_q)
  string(JSON seq GET "${output}" results ${index} seq)
  string(JSON direction GET "${output}" results ${index} direction)
  string(JSON flops GET "${output}" results ${index} flops)
  list(APPEND seen_shapes "${seq_q}:${seq}")
  list(APPEND seen_rows "${seq_q}:${seq}:${direction}")
  if(DEFINED EXPECTED_SHAPES AND NOT "${seq_q}:${seq}" IN_LIST EXPECTED_SHAPES)
    message(FATAL_ERROR "results[${index}] has seq_q ${seq_q}, seq ${seq}: not one of ${EXPECTED_SHAPES}:\n${output}")
  endif()
  foreach(expected IN LISTS EXPECTED_FLOPS)
    parse_expected_flops("${expected}")
    if(seq_q EQUAL want_seq_q AND seq EQUAL want_seq AND direction STREQUAL want_direction AND
       NOT flops EQUAL want_flops)
      message(FATAL_ERROR "results[${index}] (seq_q ${seq_q}, seq ${seq}, ${direction}) has flops ${flops}, "
                          "expected ${want_flops}:\n${output}")
    endif()
  endforeach()
endforeach()
if(DEFINED EXPECTED_SHAPES)
  list(LENGTH EXPECTED_SHAPES shape_count)
  math(EXPR per_shape "${EXPECTED_ROWS} / ${shape_count}")
  foreach(shape IN LISTS EXPECTED_SHAPES)
    set(matches "${seen_shapes}")
    list(FILTER matches INCLUDE REGEX "^${shape}$")
    list(LENGTH matches count)
    if(NOT count EQUAL per_shape)
      message(FATAL_ERROR "expected ${per_shape} rows of seq_q:seq ${shape}, got ${count} (rows: ${seen_shapes})")
    endif()
  endforeach()
endif()
# Every EXPECTED_FLOPS entry must have matched a row.
foreach(expected IN LISTS EXPECTED_FLOPS)
  parse_expected_flops("${expected}")
  if(NOT "${want_seq_q}:${want_seq}:${want_direction}" IN_LIST seen_rows)
    message(FATAL_ERROR "EXPECTED_FLOPS names seq_q ${want_seq_q}, seq ${want_seq}, ${want_direction}, "
                        "which no row has (rows: ${seen_rows})")
  endif()
endforeach()
