# CTest cmake_git_hash: ms_git_hash (cmake/git_hash.cmake) names this
# project's own commit only. Builds three source trees under MS_WORK_DIR:
#   - exported (no .git of its own) into a subfolder of another repository:
#     "unknown", not the other repository's commit;
#   - the same with a `git archive` hash substituted: that hash;
#   - its own repository (even inside the other one): its own commit.
# usage: cmake -DMS_SOURCE_DIR=... -DMS_WORK_DIR=... -P git_hash_test.cmake
cmake_minimum_required(VERSION 3.24)  # the policies CMakeLists.txt runs ms_git_hash under
include(${MS_SOURCE_DIR}/cmake/git_hash.cmake)

function(expect what got want)
  if(NOT got STREQUAL want)
    message(SEND_ERROR "${what}: got '${got}', wanted '${want}'")
  else()
    message(STATUS "ok: ${what} = ${got}")
  endif()
endfunction()

# git with a fixed identity and no user or system configuration.
set(ENV{GIT_CONFIG_NOSYSTEM} 1)
set(ENV{GIT_CONFIG_GLOBAL} /dev/null)
set(ENV{HOME} ${MS_WORK_DIR})
function(git dir)
  execute_process(COMMAND git -c user.name=test -c user.email=test@example.invalid -c init.defaultBranch=main
                          -c commit.gpgsign=false ${ARGN}
                  WORKING_DIRECTORY ${dir} RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "git ${ARGN} in ${dir}: ${err}")
  endif()
endfunction()
function(head_of dir out)
  execute_process(COMMAND git rev-parse --short HEAD WORKING_DIRECTORY ${dir} OUTPUT_VARIABLE h
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  set(${out} ${h} PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${MS_WORK_DIR})
set(outer ${MS_WORK_DIR}/outer)
set(tree ${outer}/vendor/moestream)
file(MAKE_DIRECTORY ${tree}/cmake)
file(WRITE ${outer}/README "another project\n")
git(${outer} init -q)
git(${outer} add README)
git(${outer} commit -q -m outer)
head_of(${outer} outer_hash)

# An exported tree: the file as a checkout has it.
file(COPY ${MS_SOURCE_DIR}/cmake/git_archive_hash.txt DESTINATION ${tree}/cmake)
ms_git_hash(${tree} h)
expect("exported into another repository" "${h}" unknown)
if(h STREQUAL outer_hash)
  message(SEND_ERROR "the other repository's commit ${outer_hash} was reported")
endif()

# A `git archive` export: the substituted hash.
file(WRITE ${tree}/cmake/git_archive_hash.txt "abc1234\n")
ms_git_hash(${tree} h)
expect("git archive export" "${h}" abc1234)

# Its own repository, nested in the other one: its own commit.
git(${tree} init -q)
git(${tree} add cmake)
git(${tree} commit -q -m own)
head_of(${tree} own_hash)
ms_git_hash(${tree} h)
expect("own repository" "${h}" ${own_hash})

# The header written at every build (cmake/write_git_hash.cmake) follows new
# commits, and is left alone (same timestamp) while the commit stays.
file(COPY ${MS_SOURCE_DIR}/cmake/git_hash.cmake ${MS_SOURCE_DIR}/cmake/write_git_hash.cmake DESTINATION ${tree}/cmake)
set(header ${MS_WORK_DIR}/gen/ms_git_hash.h)
function(write_header)
  execute_process(COMMAND ${CMAKE_COMMAND} -DMS_SOURCE_DIR=${tree} -DMS_OUT=${header}
                          -P ${tree}/cmake/write_git_hash.cmake RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "write_git_hash.cmake failed: ${rc}")
  endif()
endfunction()
function(header_hash out)
  file(STRINGS ${header} line REGEX "MOESTREAM_GIT_HASH")
  string(REGEX REPLACE ".*\"(.*)\".*" "\\1" h "${line}")
  set(${out} ${h} PARENT_SCOPE)
endfunction()
write_header()
header_hash(h)
expect("build-time header" "${h}" ${own_hash})
file(TIMESTAMP ${header} t1 "%s")
execute_process(COMMAND ${CMAKE_COMMAND} -E sleep 1.1)
write_header()
file(TIMESTAMP ${header} t2 "%s")
expect("header untouched while the commit stays" "${t2}" "${t1}")
file(WRITE ${tree}/NEW "a later commit\n")
git(${tree} add NEW)
git(${tree} commit -q -m later)
head_of(${tree} later_hash)
write_header()
header_hash(h)
expect("build-time header after a new commit" "${h}" ${later_hash})

file(REMOVE_RECURSE ${MS_WORK_DIR})
