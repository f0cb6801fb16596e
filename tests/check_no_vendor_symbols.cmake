# Fails when OBJECT needs a CUDA or cuDNN function from the linker: the fused
# attention must reach cuDNN only through dlsym (the frontend's dynamic loading).
execute_process(COMMAND ${NM} -u ${OBJECT} OUTPUT_VARIABLE undefined RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "nm -u ${OBJECT} failed (${result})")
endif()
string(REGEX MATCHALL "U (cudnn|cuda|cu|nvrtc)[A-Z][A-Za-z0-9_]*" vendor "${undefined}")
if(vendor)
  message(FATAL_ERROR "${OBJECT} needs vendor functions at link time: ${vendor}")
endif()
if(NOT undefined MATCHES "U dlsym")
  message(FATAL_ERROR "${OBJECT} does not use dlsym; was it built without the cuDNN frontend?")
endif()
message(STATUS "${OBJECT} resolves cuDNN at run time only")
