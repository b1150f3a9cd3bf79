# NCCL (data parallelism's collectives) ships beside the CUDA toolkit here, and in the Python
# environment on the GPU host (env.sh puts it on the library path there).
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/include /usr/include)
find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/lib /usr/lib/x86_64-linux-gnu)
if(NOT NCCL_INCLUDE_DIR OR NOT NCCL_LIBRARY)
  message(FATAL_ERROR "NCCL not found: install NCCL 2 for CUDA 13 (libnccl-dev)")
endif()
add_library(reprise::nccl INTERFACE IMPORTED)
target_include_directories(reprise::nccl INTERFACE ${NCCL_INCLUDE_DIR})
target_link_libraries(reprise::nccl INTERFACE ${NCCL_LIBRARY})
message(STATUS "NCCL: ${NCCL_LIBRARY}")
