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
  if(NUMASERVE_SANITIZE_LIST)
    target_compile_options(${target} PRIVATE -fsanitize=${NUMASERVE_SANITIZE_LIST} -fno-omit-frame-pointer -fno-sanitize-recover=all)
    target_link_options(${target} PRIVATE -fsanitize=${NUMASERVE_SANITIZE_LIST})
  endif()
endfunction()

# numaserve_add_test(NAME SOURCES a.cpp ... LIBS x ... [LABELS l ...] [DEFINITIONS D=v ...])
# Builds one GoogleTest binary and registers each of its cases as a CTest
# test, so ctest reports (and -R selects) individual cases.
function(numaserve_add_test name)
  cmake_parse_arguments(T "" "" "SOURCES;LIBS;LABELS;DEFINITIONS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  numaserve_target_defaults(${name})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main)
  target_compile_definitions(${name} PRIVATE ${T_DEFINITIONS})
  # A hung case fails on its own instead of stalling the whole run.
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 30 PROPERTIES LABELS "${T_LABELS}" TIMEOUT 60)
endfunction()
