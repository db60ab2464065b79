# Enforces the dependency direction of the design at configure time:
#   tools -> report -> analysis -> symbolize -> reader -> format,  preload -> format.
# A target may link only memstep targets of lower layers, and preload/ may link
# only an allow-list of system libraries. A violation stops the configure step.

set(_memstep_layers
  memstep_format memstep_reader memstep_symbolize memstep_analysis memstep_report memstep_cli memstep)

function(_memstep_layer_of target out)
  list(FIND _memstep_layers ${target} idx)
  set(${out} ${idx} PARENT_SCOPE)
endfunction()

function(memstep_check_layering)
  foreach(t IN LISTS _memstep_layers)
    if(NOT TARGET ${t})
      continue()
    endif()
    _memstep_layer_of(${t} my_layer)
    foreach(prop LINK_LIBRARIES INTERFACE_LINK_LIBRARIES)
      get_target_property(deps ${t} ${prop})
      if(NOT deps)
        continue()
      endif()
      foreach(d IN LISTS deps)
        if(d STREQUAL "memstep_preload")
          message(FATAL_ERROR "layering: ${t} links memstep_preload; nothing may depend on preload/")
        endif()
        _memstep_layer_of("${d}" dep_layer)
        if(dep_layer GREATER_EQUAL 0 AND NOT dep_layer LESS my_layer)
          message(FATAL_ERROR "layering: ${t} links ${d}, which is not below it "
                              "(tools -> report -> analysis -> symbolize -> reader -> format)")
        endif()
      endforeach()
    endforeach()
  endforeach()

  if(TARGET memstep_preload)
    get_target_property(deps memstep_preload LINK_LIBRARIES)
    if(deps)
      foreach(d IN LISTS deps)
        if(NOT d MATCHES "^(memstep_format|dl|m|pthread|Threads::Threads|-Wl,.*|-nostdlib\\+\\+|-static-libgcc)$")
          message(FATAL_ERROR "layering: preload/ may link only memstep_format and libc/libm/libdl; "
                              "it links ${d}")
        endif()
      endforeach()
    endif()
  endif()
endfunction()
