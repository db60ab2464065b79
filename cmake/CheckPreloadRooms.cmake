# Enforces preload/'s rooms at configure time: a file in preload/ROOM may
# include preload/ headers only from the rooms ROOM may use (each room's
# README.md says the same), and nothing in src/ or tools/ includes preload/.
# A violation stops the configure step, naming the file and the include
# (tests/layering plants one of each kind).

set(_memstep_room_core core)
set(_memstep_room_host core host steps trace)
set(_memstep_room_steps core host steps cuda/cuda.h)
set(_memstep_room_trace core host steps trace)
set(_memstep_room_cuda core host steps cuda)
set(_memstep_room_python core host steps python)

# ROOT: the source tree to check (default: this project's).
function(memstep_check_preload_rooms)
  set(root ${PROJECT_SOURCE_DIR})
  if(ARGC GREATER 0)
    set(root ${ARGV0})
  endif()
  foreach(room core host steps trace cuda python)
    file(GLOB files ${root}/preload/${room}/*.h ${root}/preload/${room}/*.cc)
    foreach(f IN LISTS files)
      file(STRINGS ${f} includes REGEX "^#include \"preload/")
      foreach(line IN LISTS includes)
        file(RELATIVE_PATH rel ${root} ${f})
        string(REGEX MATCH "preload/([a-z]+)/([a-z_]+\\.h)" _ "${line}")
        set(to_room ${CMAKE_MATCH_1})
        set(to_file "${CMAKE_MATCH_1}/${CMAKE_MATCH_2}")
        if(to_room STREQUAL "")
          message(FATAL_ERROR "preload rooms:\n  ${rel} includes a preload/ header outside any "
                              "room: ${line}")
        endif()
        list(FIND _memstep_room_${room} ${to_room} by_room)
        list(FIND _memstep_room_${room} ${to_file} by_file)
        if(by_room LESS 0 AND by_file LESS 0)
          string(REPLACE ";" ", " may "${_memstep_room_${room}}")
          message(FATAL_ERROR "preload rooms:\n  ${rel} (room ${room}) may not include ${to_file}\n"
                              "  ${room} may use: ${may} (preload/${room}/README.md)")
        endif()
      endforeach()
    endforeach()
  endforeach()
  file(GLOB_RECURSE offline ${root}/src/*.h ${root}/src/*.cc ${root}/tools/*.h ${root}/tools/*.cc)
  foreach(f IN LISTS offline)
    file(STRINGS ${f} includes REGEX "^#include \"preload/")
    if(includes)
      file(RELATIVE_PATH rel ${root} ${f})
      message(FATAL_ERROR "preload rooms:\n  ${rel} includes preload/ (${includes})\n"
                          "  the offline side shares only src/format with the library")
    endif()
  endforeach()
endfunction()
