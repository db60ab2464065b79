# Enforces preload/'s rooms at configure time: a file in preload/ROOM may
# include preload/ headers only from the rooms ROOM may use (each room's
# README.md says the same), and nothing in src/ or tools/ includes preload/.
# A violation stops the configure step, naming the file and the include.

set(_memstep_room_core core)
set(_memstep_room_host core host steps trace)
set(_memstep_room_steps core host steps cuda/cuda.h)
set(_memstep_room_trace core host steps trace)
set(_memstep_room_cuda core host steps cuda)
set(_memstep_room_python core host steps python)

function(memstep_check_preload_rooms)
  set(root ${PROJECT_SOURCE_DIR})
  foreach(room core host steps trace cuda python)
    file(GLOB files ${root}/preload/${room}/*.h ${root}/preload/${room}/*.cc)
    foreach(f IN LISTS files)
      file(STRINGS ${f} includes REGEX "^#include \"preload/")
      foreach(line IN LISTS includes)
        string(REGEX MATCH "preload/([a-z]+)/([a-z_]+\\.h)" _ "${line}")
        set(to_room ${CMAKE_MATCH_1})
        set(to_file "${CMAKE_MATCH_1}/${CMAKE_MATCH_2}")
        if(to_room STREQUAL "")
          message(FATAL_ERROR "preload rooms: ${f} includes a preload/ header outside any room: ${line}")
        endif()
        list(FIND _memstep_room_${room} ${to_room} by_room)
        list(FIND _memstep_room_${room} ${to_file} by_file)
        if(by_room LESS 0 AND by_file LESS 0)
          message(FATAL_ERROR "preload rooms: ${f} (room ${room}) may not include ${to_file}; "
                              "${room} may use: ${_memstep_room_${room}} (preload/${room}/README.md)")
        endif()
      endforeach()
    endforeach()
  endforeach()
  file(GLOB_RECURSE offline ${root}/src/*.h ${root}/src/*.cc ${root}/tools/*.h ${root}/tools/*.cc)
  foreach(f IN LISTS offline)
    file(STRINGS ${f} includes REGEX "^#include \"preload/")
    if(includes)
      message(FATAL_ERROR "preload rooms: ${f} includes preload/ (${includes}); the offline side "
                          "shares only src/format with the library")
    endif()
  endforeach()
endfunction()
