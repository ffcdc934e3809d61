# SPDX-License-Identifier: Apache-2.0
# Sanitizer flags (DCP_SANITIZE), applied through the dcp_sanitizers interface target.
add_library(dcp_sanitizers INTERFACE)
if(NOT DCP_SANITIZE STREQUAL "none" AND NOT DCP_SANITIZE STREQUAL "")
  set(_dcp_san_flags -fsanitize=${DCP_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  target_compile_options(dcp_sanitizers INTERFACE ${_dcp_san_flags})
  target_link_options(dcp_sanitizers INTERFACE ${_dcp_san_flags})
endif()

# Every dcp target links both; dcp_add_library is the one place that says so.
function(dcp_add_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(dcp_${name} ${ARG_SOURCES})
  add_library(dcp::${name} ALIAS dcp_${name})
  target_include_directories(dcp_${name} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>)
  target_link_libraries(dcp_${name} PUBLIC ${ARG_DEPS} dcp_sanitizers PRIVATE dcp_warnings)
endfunction()
