# Run by the helm_prometheus_rules test (tests/helm/CMakeLists.txt): renders the chart with VALUES
# as release demo in namespace llm (the names TESTS expects), extracts the PrometheusRule's groups
# into a plain rules file beside a copy of TESTS in OUT_DIR, then runs `promtool check rules` on it
# and `promtool test rules` on TESTS.
file(MAKE_DIRECTORY ${OUT_DIR})
execute_process(COMMAND ${HELM_RENDER} ${CHART} -f ${VALUES} --release-name demo --namespace llm
                RESULT_VARIABLE rc OUTPUT_FILE ${OUT_DIR}/manifest.yaml ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "rendering ${CHART} with ${VALUES} failed:\n${err}")
endif()
execute_process(COMMAND ${PYTHON} ${EXTRACT} ${OUT_DIR}/manifest.yaml ${OUT_DIR}/rules.yaml
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "extracting the rules failed:\n${out}${err}")
endif()
message(STATUS "${out}")
execute_process(COMMAND ${PROMTOOL} check rules ${OUT_DIR}/rules.yaml
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "promtool check rules failed:\n${out}${err}")
endif()
message(STATUS "${out}${err}")
get_filename_component(tests_name ${TESTS} NAME)
configure_file(${TESTS} ${OUT_DIR}/${tests_name} COPYONLY)
execute_process(COMMAND ${PROMTOOL} test rules ${tests_name} WORKING_DIRECTORY ${OUT_DIR}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "promtool test rules failed:\n${out}${err}")
endif()
message(STATUS "${out}${err}")
