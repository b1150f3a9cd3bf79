# Tests tell the truth: the README's test command (ctest --output-on-failure) ends with one line
# saying how many GPU tests ran and how many were skipped and why, and a run without a GPU shows
# reprise_gpu_tests as "Skipped" (not "Passed") and says "CPU-only run".
#
# The GPU test binary has its own main (tests/gpu/gpu_test_main.cc): it counts its tests and writes
# that line to REPRISE_TEST_SUMMARY. CTest shows only failing tests' output, so the line is printed
# by CTest itself after the tests (CTEST_CUSTOM_POST_TEST in the build folder's CTestCustom.cmake,
# whose output CTest always shows); the file is removed before the tests, so a ctest run that
# leaves the GPU tests out says so instead of repeating an old result.
set(REPRISE_TEST_SUMMARY_FILE ${CMAKE_BINARY_DIR}/gpu_test_summary.txt)

get_target_property(_gpu_test_libs reprise_gpu_tests LINK_LIBRARIES)
list(REMOVE_ITEM _gpu_test_libs GTest::gtest_main)
# Its main installs Abseil's failure signal handler: a crash prints a symbolised stack.
list(APPEND _gpu_test_libs absl::failure_signal_handler absl::symbolize)
set_property(TARGET reprise_gpu_tests PROPERTY LINK_LIBRARIES ${_gpu_test_libs})
set_property(TEST reprise_gpu_tests APPEND PROPERTY
  ENVIRONMENT "REPRISE_TEST_SUMMARY=${REPRISE_TEST_SUMMARY_FILE}")
# Printed by gpu_test_main.cc only when no device is visible and no test failed, so a failure is
# never hidden behind "Skipped".
set_property(TEST reprise_gpu_tests PROPERTY SKIP_REGULAR_EXPRESSION "CPU-only run")

configure_file(${PROJECT_SOURCE_DIR}/cmake/print_test_summary.cmake.in
               ${CMAKE_BINARY_DIR}/print_test_summary.cmake @ONLY)
file(WRITE ${CMAKE_BINARY_DIR}/CTestCustom.cmake
  "set(CTEST_CUSTOM_PRE_TEST \"\\\"${CMAKE_COMMAND}\\\" -E rm -f \\\"${REPRISE_TEST_SUMMARY_FILE}\\\"\")\n"
  "set(CTEST_CUSTOM_POST_TEST \"\\\"${CMAKE_COMMAND}\\\" -P \\\"${CMAKE_BINARY_DIR}/print_test_summary.cmake\\\"\")\n")
