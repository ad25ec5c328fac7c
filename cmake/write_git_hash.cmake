# Writes MS_OUT, a header defining MOESTREAM_GIT_HASH as the commit the source
# tree at MS_SOURCE_DIR is at now (cmake/git_hash.cmake's rules). Run at every
# build (a custom target), not only at configure time, so a binary never names
# an older commit than its sources'; the file is rewritten only when the hash
# changes, so an unchanged commit recompiles nothing.
#
#   cmake -DMS_SOURCE_DIR=... -DMS_OUT=.../ms_git_hash.h -P cmake/write_git_hash.cmake
include(${CMAKE_CURRENT_LIST_DIR}/git_hash.cmake)
ms_git_hash(${MS_SOURCE_DIR} hash)
set(text "// Written by cmake/write_git_hash.cmake at build time.\n#pragma once\n#define MOESTREAM_GIT_HASH \"${hash}\"\n")
set(old "")
if(EXISTS ${MS_OUT})
  file(READ ${MS_OUT} old)
endif()
if(NOT old STREQUAL text)
  file(WRITE ${MS_OUT} "${text}")
endif()
