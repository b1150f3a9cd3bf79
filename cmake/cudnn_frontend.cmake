# NVIDIA's header-only cudnn-frontend (the cuDNN graph API in C++), for fused attention and
# convolutions. The PyPI package nvidia-cudnn-frontend ships its headers;
# -DCUDNN_FRONTEND_INCLUDE_DIR=... overrides. Its headers are large: only src/runtime/cudnn_sdpa.cc,
# src/runtime/cudnn_conv_graph{,_describe}.cc and src/runtime/cudnn_gelu_product.cc include them
# (behind headers of our own), so the include directory and the warnings it needs silenced are set
# on those four sources.
set(REPRISE_CUDNN_FRONTEND_SOURCE ${PROJECT_SOURCE_DIR}/src/runtime/cudnn_sdpa.cc
    ${PROJECT_SOURCE_DIR}/src/runtime/cudnn_conv_graph.cc
    ${PROJECT_SOURCE_DIR}/src/runtime/cudnn_conv_graph_describe.cc
    ${PROJECT_SOURCE_DIR}/src/runtime/cudnn_gelu_product.cc)
if(NOT CUDNN_FRONTEND_INCLUDE_DIR)
  # The Python that pip installed into: CMake's choice, else the first python3 on PATH.
  find_package(Python3 COMPONENTS Interpreter QUIET)
  find_program(REPRISE_PATH_PYTHON3 python3)
  foreach(python IN ITEMS "${Python3_EXECUTABLE}" "${REPRISE_PATH_PYTHON3}")
    if(NOT python OR CUDNN_FRONTEND_INCLUDE_DIR)
      continue()
    endif()
    # importlib.metadata finds the installed files without importing the package (which loads
    # cuDNN).
    execute_process(
      COMMAND ${python} -c
        "import importlib.metadata as m; print(m.distribution('nvidia-cudnn-frontend').locate_file('include'))"
      OUTPUT_VARIABLE REPRISE_FRONTEND_GUESS OUTPUT_STRIP_TRAILING_WHITESPACE
      ERROR_QUIET RESULT_VARIABLE REPRISE_FRONTEND_RESULT)
    if(REPRISE_FRONTEND_RESULT EQUAL 0 AND EXISTS "${REPRISE_FRONTEND_GUESS}/cudnn_frontend.h")
      set(CUDNN_FRONTEND_INCLUDE_DIR "${REPRISE_FRONTEND_GUESS}" CACHE PATH
          "Directory holding cudnn_frontend.h")
    endif()
  endforeach()
endif()
if(NOT CUDNN_FRONTEND_INCLUDE_DIR OR NOT EXISTS "${CUDNN_FRONTEND_INCLUDE_DIR}/cudnn_frontend.h")
  message(FATAL_ERROR
    "cudnn-frontend headers not found (cudnn_frontend.h): run `pip install nvidia-cudnn-frontend` "
    "with the Python that CMake finds, or pass -DCUDNN_FRONTEND_INCLUDE_DIR=<dir holding "
    "cudnn_frontend.h>")
endif()
message(STATUS "cudnn-frontend: ${CUDNN_FRONTEND_INCLUDE_DIR}")
# CUDNN_FRONTEND_SKIP_JSON_LIB leaves out graph serialisation (nlohmann/json), which we do not use
# and which doubles the compile time. -isystem silences the headers' own warnings under -Wextra.
set_source_files_properties(${REPRISE_CUDNN_FRONTEND_SOURCE} PROPERTIES
  COMPILE_OPTIONS "-isystem;${CUDNN_FRONTEND_INCLUDE_DIR}"
  COMPILE_DEFINITIONS "CUDNN_FRONTEND_SKIP_JSON_LIB")
