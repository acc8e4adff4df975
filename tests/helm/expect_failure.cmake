# cmake -DCOMMAND="prog|arg|..." -DEXPECT_FAIL=regex -P expect_failure.cmake
# Passes when COMMAND exits non-zero and its output (stdout and stderr) matches EXPECT_FAIL.
string(REPLACE "|" ";" command "${COMMAND}")
execute_process(COMMAND ${command} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
# message(FATAL_ERROR) output of a nested cmake -P wraps lines: compare with whitespace collapsed.
string(REGEX REPLACE "[ \n]+" " " flat "${out}${err}")
if(rc EQUAL 0)
  message(FATAL_ERROR "expected a failure, but it succeeded:\n${out}${err}")
endif()
if(NOT flat MATCHES "${EXPECT_FAIL}")
  message(FATAL_ERROR "failed (exit ${rc}) but the output does not match '${EXPECT_FAIL}':\n${out}${err}")
endif()
message(STATUS "failed as expected (exit ${rc}):\n${out}${err}")
