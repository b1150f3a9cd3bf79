# Sanitizers and fuzzing for the host C++ code (CUDA device code is left alone).
#
#   cmake -S . -B build-asan -G Ninja -DREPRISE_SANITIZE="address;undefined"
#   cmake --build build-asan --target reprise_cpu_tests && ./build-asan/reprise_cpu_tests
#
# REPRISE_SANITIZE: the -fsanitize= list for every C++ object and executable (GCC or clang):
# "address;undefined" finds out-of-bounds accesses, use after free, leaks, overflowing signed
# arithmetic and other undefined behaviour; UBSan's findings abort the test (no recovery), so a
# finding fails it. Tests run with allocator_may_return_null=1, so a test of a huge allocation
# sees the failure the engine reports (ResourceExhausted) rather than ASan's abort.
#
# REPRISE_FUZZ: the libFuzzer targets of tests/fuzz (clang only; tests/fuzz/run.sh configures a
# build that way and runs them).
set(REPRISE_SANITIZE "" CACHE STRING "Sanitizers for the host C++ code, e.g. address;undefined")
option(REPRISE_FUZZ "Build the libFuzzer targets of tests/fuzz (clang)" OFF)

if(REPRISE_SANITIZE)
  list(JOIN REPRISE_SANITIZE "," reprise_sanitizers)
  add_compile_options(
    "$<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${reprise_sanitizers}>"
    "$<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize-recover=all>"
    "$<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>")
  add_link_options("$<$<LINK_LANGUAGE:CXX>:-fsanitize=${reprise_sanitizers}>")
  function(reprise_sanitizer_environment)
    get_property(tests DIRECTORY ${PROJECT_SOURCE_DIR} PROPERTY TESTS)
    if(tests)
      set_property(TEST ${tests} APPEND PROPERTY ENVIRONMENT
        "ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1"
        "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
    endif()
  endfunction()
  # The tests are declared after this file is included: set their environment at the end.
  cmake_language(DEFER DIRECTORY ${PROJECT_SOURCE_DIR} CALL reprise_sanitizer_environment)
  message(STATUS "Sanitizers: ${reprise_sanitizers}")
endif()

if(REPRISE_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "REPRISE_FUZZ needs clang (libFuzzer): -DCMAKE_CXX_COMPILER=clang++")
  endif()
  # Coverage for the fuzzers in every object they link, the library included.
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link>")
  add_subdirectory(${PROJECT_SOURCE_DIR}/tests/fuzz ${PROJECT_BINARY_DIR}/fuzz)
endif()
