# The layer rules of docs/architecture.md ("Code layers") as a configure-time check, so a link that
# breaks them fails at once instead of being found when the router is built without the model.

# Fails the configure step when `target` depends, directly or transitively, on any target listed
# after it.
function(baton_forbid_dependencies target)
  set(seen "")
  set(queue ${target})
  while(queue)
    list(POP_FRONT queue current)
    if(current IN_LIST seen OR NOT TARGET ${current})
      continue()
    endif()
    list(APPEND seen ${current})
    set(deps "")
    foreach(property LINK_LIBRARIES INTERFACE_LINK_LIBRARIES)
      get_target_property(value ${current} ${property})
      if(value)
        list(APPEND deps ${value})
      endif()
    endforeach()
    foreach(dep IN LISTS deps)
      # Static libraries list their private dependencies as $<LINK_ONLY:dep>.
      string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" dep "${dep}")
      if(dep IN_LIST ARGN)
        message(FATAL_ERROR "${target} must not depend on ${dep} (${current} links it): see docs/architecture.md, "
                            "\"Code layers\"")
      endif()
      list(APPEND queue ${dep})
    endforeach()
  endwhile()
endfunction()
