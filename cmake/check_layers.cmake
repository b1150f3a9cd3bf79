# The include rule of the library's layers (CMakeLists.txt, REPRISE_LAYERS: name=folder, lowest
# first): a source of a layer may include headers of its own layer and of the layers before it,
# never of one after it. Public headers (include/reprise) count as the layer that implements
# them: the vocabulary types below as ir, which everything may use; those named in _public_layers
# as that layer; the rest (trainer.h, nn.h, models.h, ...) as api.
# Run as: cmake -DROOT=<source dir> -DLAYERS=util=src/util,ir=src/ir,... -P check_layers.cmake
cmake_minimum_required(VERSION 3.24)
set(_vocabulary tensor.h graph.h optimizer.h data_parallel.h mirror_options.h channels_last.h
    non_finite.h progress.h)
set(_public_layers data.h=data status_macros.h=util)
string(REPLACE "," ";" LAYERS "${LAYERS}")
set(_names "")
set(_folders "")
foreach(_entry IN LISTS LAYERS)
  string(REPLACE "=" ";" _entry "${_entry}")
  list(GET _entry 0 _name)
  list(GET _entry 1 _folder)
  list(APPEND _names ${_name})
  list(APPEND _folders ${_folder})
endforeach()

# The layer index of a path relative to ROOT (a source or an included header), or -1 when it is
# no library file (a system or third-party header).
function(layer_of path out)
  set(${out} -1 PARENT_SCOPE)
  if(path MATCHES "^reprise/(.*)$")
    set(_header "${CMAKE_MATCH_1}")
    set(_layer api)
    if(_header IN_LIST _vocabulary)
      set(_layer ir)
    endif()
    foreach(_entry IN LISTS _public_layers)
      if(_entry MATCHES "^${_header}=(.*)$")
        set(_layer ${CMAKE_MATCH_1})
      endif()
    endforeach()
    list(FIND _names ${_layer} _index)
    set(${out} ${_index} PARENT_SCOPE)
    return()
  endif()
  get_filename_component(_dir "${path}" DIRECTORY)
  list(FIND _folders "${_dir}" _index)
  if(_index GREATER -1)
    set(${out} ${_index} PARENT_SCOPE)
    return()
  endif()
  if(path MATCHES "^(src|capture)/")
    set(${out} -2 PARENT_SCOPE)  # A library folder that is in no layer.
  endif()
endfunction()

file(GLOB_RECURSE _files RELATIVE ${ROOT} ${ROOT}/src/*.h ${ROOT}/src/*.cc ${ROOT}/src/*.inc
     ${ROOT}/capture/*.h ${ROOT}/capture/*.cc)
set(_errors "")
foreach(_file IN LISTS _files)
  layer_of("${_file}" _own)
  if(_own EQUAL -2)
    list(APPEND _errors "${_file}: its folder is in no layer (add it to REPRISE_LAYERS)")
    continue()
  endif()
  file(STRINGS ${ROOT}/${_file} _includes REGEX "^#include \"[^\"]+\"")
  foreach(_line IN LISTS _includes)
    string(REGEX REPLACE "^#include \"([^\"]+)\".*$" "\\1" _header "${_line}")
    layer_of("${_header}" _theirs)
    if(_theirs GREATER _own)
      list(GET _names ${_own} _own_name)
      list(GET _names ${_theirs} _their_name)
      list(APPEND _errors
           "${_file} (layer ${_own_name}) includes ${_header} (layer ${_their_name})")
    endif()
  endforeach()
endforeach()
if(_errors)
  list(JOIN _errors "\n  " _text)
  message(FATAL_ERROR "Includes that climb a layer (see REPRISE_LAYERS in CMakeLists.txt):\n"
                      "  ${_text}")
endif()
