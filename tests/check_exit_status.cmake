# Runs COMMAND (a ;-list) and checks that it exits with EXPECTED_STATUS and
# that its stderr matches EXPECTED_STDERR (a regular expression).
# Run with cmake -P.
execute_process(COMMAND ${COMMAND} RESULT_VARIABLE status OUTPUT_VARIABLE output ERROR_VARIABLE errors)
if(NOT status EQUAL EXPECTED_STATUS)
  message(FATAL_ERROR "${COMMAND} exited with ${status}, expected ${EXPECTED_STATUS}:\n${output}\n${errors}")
endif()
if(NOT errors MATCHES "${EXPECTED_STDERR}")
  message(FATAL_ERROR "stderr of ${COMMAND} does not match '${EXPECTED_STDERR}':\n${errors}")
endif()
