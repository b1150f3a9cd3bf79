# `cmake --install build --prefix <dir>` installs the library, its public headers and a CMake
# package, so that another project uses it with
#   find_package(reprise REQUIRED)
#   target_link_libraries(app PRIVATE reprise::reprise)
# (CMAKE_PREFIX_PATH=<dir>). Every library target the exported ones link, privately included
# (static libraries carry their private dependencies into the link), must be in this list: the
# layer libraries of REPRISE_LAYERS come by themselves. `reprise` is the one users name.
set(REPRISE_INSTALL_TARGETS reprise reprise_kernels reprise_device_launch)
foreach(_entry IN LISTS REPRISE_LAYERS)
  string(REPLACE "=" ";" _entry "${_entry}")
  list(GET _entry 0 _layer)
  list(APPEND REPRISE_INSTALL_TARGETS reprise_${_layer})
endforeach()

include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
set(REPRISE_CMAKE_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/reprise)

foreach(_target IN LISTS REPRISE_INSTALL_TARGETS)
  # A source-tree include directory in a target's interface (include/) is where the headers are
  # while building; installed, they are under <prefix>/include.
  get_target_property(_dirs ${_target} INTERFACE_INCLUDE_DIRECTORIES)
  if(_dirs)
    set(_wrapped "")
    foreach(_dir IN LISTS _dirs)
      if(_dir MATCHES "^${PROJECT_SOURCE_DIR}" OR _dir MATCHES "^${PROJECT_BINARY_DIR}")
        list(APPEND _wrapped "$<BUILD_INTERFACE:${_dir}>")
      else()
        list(APPEND _wrapped "${_dir}")
      endif()
    endforeach()
    set_target_properties(${_target} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_wrapped}")
  endif()
  target_include_directories(${_target} INTERFACE $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
endforeach()
add_library(reprise::reprise ALIAS reprise)  # The same name inside this build.
target_compile_features(reprise INTERFACE cxx_std_20)  # The public headers are C++20.

install(TARGETS ${REPRISE_INSTALL_TARGETS} EXPORT reprise-targets COMPONENT dev
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/reprise DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        COMPONENT dev)
install(EXPORT reprise-targets NAMESPACE reprise:: DESTINATION ${REPRISE_CMAKE_INSTALL_DIR}
        COMPONENT dev)
# The config finds the dependencies as this build did: cuDNN and NCCL by the same files.
if(MPI_C_FOUND)
  set(REPRISE_CONFIG_WITH_MPI ON)
else()
  set(REPRISE_CONFIG_WITH_MPI OFF)
endif()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/reprise-config.cmake.in
  ${PROJECT_BINARY_DIR}/reprise-config.cmake INSTALL_DESTINATION ${REPRISE_CMAKE_INSTALL_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/reprise-config-version.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/reprise-config.cmake
              ${PROJECT_BINARY_DIR}/reprise-config-version.cmake
              ${PROJECT_SOURCE_DIR}/cmake/cudnn.cmake ${PROJECT_SOURCE_DIR}/cmake/nccl.cmake
        DESTINATION ${REPRISE_CMAKE_INSTALL_DIR} COMPONENT dev)

# The package test: installs this build tree (no rebuild) into a temporary prefix, then
# configures and builds tests/consumer (the README's C++ example) against it.
add_test(NAME reprise_cmake_package
  COMMAND ${CMAKE_COMMAND} -DBUILD_DIR=${PROJECT_BINARY_DIR} -DSOURCE_DIR=${PROJECT_SOURCE_DIR}
          -DWORK_DIR=${PROJECT_BINARY_DIR}/consumer_test -DGENERATOR=${CMAKE_GENERATOR}
          -DCXX_COMPILER=${CMAKE_CXX_COMPILER}
          -P ${PROJECT_SOURCE_DIR}/tests/consumer/package_test.cmake)
set_tests_properties(reprise_cmake_package PROPERTIES LABELS cpu TIMEOUT 600)
