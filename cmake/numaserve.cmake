# Project-wide helpers: every target gets its language level, warnings and
# sanitizers from numaserve_target_defaults(); tests register through
# numaserve_add_test(). Nothing here touches global flags.

set(NUMASERVE_SANITIZERS "")
if(ASAN)
  list(APPEND NUMASERVE_SANITIZERS address)
endif()
if(UBSAN)
  list(APPEND NUMASERVE_SANITIZERS undefined)
endif()
list(JOIN NUMASERVE_SANITIZERS "," NUMASERVE_SANITIZE_LIST)

include(GoogleTest)

function(numaserve_target_defaults target)
  target_compile_features(${target} PUBLIC cxx_std_20)
  set_target_properties(${target} PROPERTIES CXX_EXTENSIONS OFF)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion)
  if(NUMASERVE_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  if(NUMASERVE_SANITIZE_LIST)
    target_compile_options(${target} PRIVATE -fsanitize=${NUMASERVE_SANITIZE_LIST} -fno-omit-frame-pointer -fno-sanitize-recover=all)
    target_link_options(${target} PRIVATE -fsanitize=${NUMASERVE_SANITIZE_LIST})
  endif()
  if(NUMASERVE_FUZZ)
    # Coverage for libFuzzer in every library; the fuzz executables add the
    # driver (-fsanitize=fuzzer) themselves.
    target_compile_options(${target} PRIVATE -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all
      -fno-omit-frame-pointer)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
    target_compile_definitions(${target} PRIVATE NUMASERVE_FUZZ_BUILD)
  endif()
endfunction()

# numaserve_add_test(NAME SOURCES a.cpp ... LIBS x ... [LABELS l ...] [DEFINITIONS D=v ...]
#                    [TIMEOUT seconds] [SERIAL])
# Builds one GoogleTest binary and registers each of its cases as a CTest
# test, so ctest reports (and -R selects) individual cases. SERIAL: its
# cases run alone, for those whose bounds on latency another test's load
# would break.
function(numaserve_add_test name)
  cmake_parse_arguments(T "SERIAL" "TIMEOUT" "SOURCES;LIBS;LABELS;DEFINITIONS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 60)
  endif()
  add_executable(${name} ${T_SOURCES})
  numaserve_target_defaults(${name})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main)
  target_compile_definitions(${name} PRIVATE ${T_DEFINITIONS})
  # A hung case fails on its own instead of stalling the whole run.
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 30
    PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT} RUN_SERIAL ${T_SERIAL})
endfunction()

# numaserve_library(NAME [FOLDER dir] [HEADER_ONLY] SOURCES a.cpp ... [PUBLIC dep ...] [PRIVATE dep ...])
# One part: the static library numaserve_NAME (alias numaserve::NAME) of a
# folder (FOLDER, relative to the current source dir; default the current
# dir). Its include root holds only that folder, under its own name, so
# `#include "features/extract.h"` resolves for the part itself and for what
# links it, and a part cannot include a sibling it does not link.
# HEADER_ONLY HEADERS a.h ...: an interface library of only those headers
# of the folder (its other headers stay the folder's full library's), so
# what links it cannot reach the rest.
function(numaserve_library name)
  cmake_parse_arguments(L "HEADER_ONLY" "FOLDER" "SOURCES;HEADERS;PUBLIC;PRIVATE" ${ARGN})
  if(NOT L_FOLDER)
    set(L_FOLDER .)
  endif()
  get_filename_component(dir "${CMAKE_CURRENT_SOURCE_DIR}/${L_FOLDER}" ABSOLUTE)
  get_filename_component(part "${dir}" NAME)
  set(root "${PROJECT_BINARY_DIR}/include/numaserve_${name}")
  if(L_HEADERS)
    file(REMOVE_RECURSE "${root}")
    file(MAKE_DIRECTORY "${root}/${part}")
    foreach(header IN LISTS L_HEADERS)
      file(CREATE_LINK "${dir}/${header}" "${root}/${part}/${header}" SYMBOLIC)
    endforeach()
  else()
    file(MAKE_DIRECTORY "${root}")
    file(CREATE_LINK "${dir}" "${root}/${part}" SYMBOLIC)
  endif()
  set(target numaserve_${name})
  if(L_HEADER_ONLY)
    add_library(${target} INTERFACE)
    target_include_directories(${target} INTERFACE "${root}")
    target_link_libraries(${target} INTERFACE ${L_PUBLIC})
  else()
    add_library(${target} STATIC ${L_SOURCES})
    numaserve_target_defaults(${target})
    target_include_directories(${target} PUBLIC "${root}")
    target_link_libraries(${target} PUBLIC ${L_PUBLIC} PRIVATE ${L_PRIVATE})
  endif()
  add_library(numaserve::${name} ALIAS ${target})
endfunction()
