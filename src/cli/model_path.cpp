#include "cli/model_path.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "engine/loaded_model.h"
#include "util/error.h"

namespace ms::cli {

void require_regular_file(const std::string& path, const std::string& flag) {
  if (path.empty()) throw Error(flag + ": the path is empty");
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw Error(flag + " " + path + ": " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw Error(flag + " " + path + ": is a directory, not a GGUF file");
  if (S_ISFIFO(st.st_mode)) throw Error(flag + " " + path + ": is a FIFO (named pipe); give a regular GGUF file");
  if (!S_ISREG(st.st_mode)) throw Error(flag + " " + path + ": not a regular file; give a GGUF file");
}

std::string model_path_or_default(const std::string& path, bool given_flag, bool quiet) {
  if (given_flag) {
    if (path.empty()) throw Error("-m: the path is empty; give a GGUF file, or leave -m out for the built-in tiny model");
    require_regular_file(path, "-m");
    return path;
  }
  bool generated = false;
  std::string p = default_model_path(&generated);
  if (!quiet)
    std::fprintf(stderr, "moestream: %s the built-in tiny model (random weights) at %s; pass -m FILE for a real one\n",
                 generated ? "generated" : "using", p.c_str());
  return p;
}

}  // namespace ms::cli
