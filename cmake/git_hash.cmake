# ms_git_hash(SOURCE_DIR OUT_VAR): the commit a build of the source tree at
# SOURCE_DIR comes from, for the headers benchmarks print.
#
# Only the project's own repository counts: git finds the repository of the
# nearest enclosing .git, so a source tree exported into a subfolder of some
# other repository would otherwise report that repository's commit. The hash
# is taken only when SOURCE_DIR is the top of its work tree. Otherwise: the
# hash `git archive` wrote into cmake/git_archive_hash.txt (export-subst), or
# "unknown".
#
# Used by CMakeLists.txt; tested by tests/cmake/git_hash_test.cmake.
function(ms_git_hash source_dir out_var)
  set(hash "")
  execute_process(COMMAND git rev-parse --show-toplevel WORKING_DIRECTORY ${source_dir}
                  OUTPUT_VARIABLE top RESULT_VARIABLE rc ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(rc EQUAL 0 AND top)
    file(REAL_PATH "${top}" top_real)
    file(REAL_PATH "${source_dir}" src_real)
    if(top_real STREQUAL src_real)
      execute_process(COMMAND git rev-parse --short HEAD WORKING_DIRECTORY ${source_dir}
                      OUTPUT_VARIABLE hash RESULT_VARIABLE rc ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
      if(NOT rc EQUAL 0)
        set(hash "")  # a repository with no commit yet
      endif()
    endif()
  endif()
  if(NOT hash AND EXISTS ${source_dir}/cmake/git_archive_hash.txt)
    # In a checkout the file still reads $Format...$ (only `git archive` substitutes it).
    file(STRINGS ${source_dir}/cmake/git_archive_hash.txt hash LIMIT_COUNT 1)
    if(hash MATCHES "Format")
      set(hash "")
    endif()
  endif()
  if(NOT hash)
    set(hash unknown)
  endif()
  set(${out_var} ${hash} PARENT_SCOPE)
endfunction()
