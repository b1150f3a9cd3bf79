# The command line shared by every tool and example (tools/cli.h): --help, --version, flag checks
# and exit codes. Included after the executables are declared. Every tools/reprise_*.cc and
# examples/*.cc program links the helper; the CPU test that runs each program with --help,
# --version, a bad value and a stray argument gets their names from the same list, and builds
# after them.
add_library(reprise_cli STATIC ${PROJECT_SOURCE_DIR}/tools/cli.cc)
target_include_directories(reprise_cli PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/include)
target_link_libraries(reprise_cli PUBLIC absl::flags absl::flags_parse absl::flags_usage
                      absl::flags_reflection absl::status absl::strings absl::synchronization)
# Only this one file sees the version and build type, so changing them recompiles one file.
# $<CONFIG> is the build type this binary was really built as (multi-config generators too).
target_compile_definitions(reprise_cli PRIVATE
  REPRISE_VERSION="${PROJECT_VERSION}" REPRISE_BUILD_TYPE="$<CONFIG>"
  REPRISE_CUDA_VERSION="${CUDAToolkit_VERSION_MAJOR}.${CUDAToolkit_VERSION_MINOR}")

set(REPRISE_CLI_PROGRAMS)
file(GLOB _cli_sources CONFIGURE_DEPENDS
  ${PROJECT_SOURCE_DIR}/tools/reprise_*.cc ${PROJECT_SOURCE_DIR}/examples/*.cc)
foreach(_source IN LISTS _cli_sources)
  get_filename_component(_name ${_source} NAME_WE)
  if(_source MATCHES "/tools/")
    string(REPLACE "_" "-" _name ${_name})  # tools/reprise_dp_bench.cc is reprise-dp-bench.
  endif()
  if(NOT TARGET ${_name})
    message(FATAL_ERROR "cmake/cli.cmake: ${_source} has no executable target '${_name}'")
  endif()
  target_link_libraries(${_name} PRIVATE reprise_cli)
  list(APPEND REPRISE_CLI_PROGRAMS ${_name})
endforeach()
if(TARGET reprise_cpu_tests)
  add_dependencies(reprise_cpu_tests ${REPRISE_CLI_PROGRAMS})
  string(REPLACE ";" "," _cli_list "${REPRISE_CLI_PROGRAMS}")
  set_property(SOURCE ${PROJECT_SOURCE_DIR}/tests/cpu/command_line_test.cc APPEND PROPERTY
    COMPILE_DEFINITIONS REPRISE_CLI_PROGRAMS="${_cli_list}" REPRISE_VERSION="${PROJECT_VERSION}"
    REPRISE_BUILD_TYPE="$<CONFIG>")
endif()
