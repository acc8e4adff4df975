# Run by baton_helm_values_test (tests/helm/CMakeLists.txt): renders CHART with VALUES and SETS
# ("--set|a=b|..."), writes the output to OUT, then runs yamllint and validate.mjs on it; with
# EXPECT_FAIL, passes only when rendering fails with a message matching it.
string(REPLACE "|" ";" set_args "${SETS}")
execute_process(COMMAND ${HELM_RENDER} ${CHART} -f ${VALUES} ${set_args}
                RESULT_VARIABLE rc OUTPUT_VARIABLE manifest ERROR_VARIABLE err)
if(EXPECT_FAIL)
  if(rc EQUAL 0)
    message(FATAL_ERROR "rendering ${CHART} with ${VALUES} ${set_args} succeeded; expected an error matching '${EXPECT_FAIL}'")
  endif()
  string(REGEX REPLACE "[ \n]+" " " flat "${err}")
  if(NOT flat MATCHES "${EXPECT_FAIL}")
    message(FATAL_ERROR "rendering failed, but not with '${EXPECT_FAIL}':\n${err}")
  endif()
  message(STATUS "rendering failed as expected:\n${err}")
  return()
endif()
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "rendering ${CHART} with ${VALUES} ${set_args} failed:\n${err}")
endif()
file(WRITE ${OUT} "${manifest}")
message(STATUS "rendered ${OUT}")

execute_process(COMMAND ${YAMLLINT} --strict -f parsable -c ${YAMLLINT_CONFIG} ${OUT}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "yamllint found problems in ${OUT}:\n${out}${err}")
endif()
execute_process(COMMAND ${NODE} ${VALIDATE} ${OUT} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "Kubernetes schema validation failed for ${OUT}:\n${out}${err}")
endif()
message(STATUS "yamllint clean; ${out}")
