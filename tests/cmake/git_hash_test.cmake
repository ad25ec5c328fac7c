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

file(REMOVE_RECURSE ${MS_WORK_DIR})
