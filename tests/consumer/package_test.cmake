# ctest's reprise_cmake_package: the README's C++ example (this folder's main.cc, which the README
# must show verbatim) builds against reprise installed from the build tree into a fresh prefix.
# Run with -DBUILD_DIR -DSOURCE_DIR -DWORK_DIR -DGENERATOR -DCXX_COMPILER.
file(READ ${SOURCE_DIR}/tests/consumer/main.cc example)
file(READ ${SOURCE_DIR}/README.md readme)
string(FIND "${readme}" "${example}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "README.md does not show tests/consumer/main.cc verbatim: update one or the other")
endif()

file(REMOVE_RECURSE ${WORK_DIR})
function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}): ${ARGN}")
  endif()
endfunction()
# Installs what is built: nothing is compiled again.
run("install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix --component dev)
run("configure" ${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer -B ${WORK_DIR}/build -G ${GENERATOR}
    -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
    -DCMAKE_BUILD_TYPE=Release)
run("build" ${CMAKE_COMMAND} --build ${WORK_DIR}/build)
message(STATUS "consumer built: ${WORK_DIR}/build/train_quadrants")
