# Common compile settings for every sluice target.
set(SLUICE_WARNINGS -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast
    -Wcast-align -Wunused -Woverloaded-virtual -Wimplicit-fallthrough)
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  # GCC 12 reports false -Wrestrict positives inside libstdc++ string code at -O3.
  list(APPEND SLUICE_WARNINGS -Wno-restrict)
endif()
if(SLUICE_WERROR)
  list(APPEND SLUICE_WARNINGS -Werror)
endif()

set(SLUICE_SANITIZE_FLAGS "")
if(SLUICE_SANITIZE)
  string(REPLACE ";" "," _san "${SLUICE_SANITIZE}")
  set(SLUICE_SANITIZE_FLAGS -fsanitize=${_san} -fno-omit-frame-pointer -fno-sanitize-recover=all)
endif()

# sluice_configure(target): warnings, sanitizers, includes from the repo root and include/.
function(sluice_configure target)
  target_compile_options(${target} PRIVATE ${SLUICE_WARNINGS} ${SLUICE_SANITIZE_FLAGS})
  target_link_options(${target} PRIVATE ${SLUICE_SANITIZE_FLAGS})
  # Installed, a target sees only the public headers (include/sluice/).
  target_include_directories(${target} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}> $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
    $<BUILD_INTERFACE:${CMAKE_BINARY_DIR}/generated> $<INSTALL_INTERFACE:include>)
endfunction()

# sluice_library(name SOURCES ... DEPS ...): one static library per top-level folder.
function(sluice_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  # Position-independent: the installed static libraries link into users' shared objects too.
  # Without semantic interposition GCC still inlines and calls directly the functions a library
  # defines (-fPIC alone routes them through the PLT and stops inlining them).
  set_target_properties(${name} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  target_compile_options(${name} PRIVATE -fno-semantic-interposition)
  sluice_configure(${name})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
  if(SLUICE_SANITIZE)
    target_link_options(${name} PUBLIC ${SLUICE_SANITIZE_FLAGS})
  endif()
endfunction()
