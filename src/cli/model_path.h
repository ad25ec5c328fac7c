// The model file a command is given with -m, checked before anything opens
// it: `-m ""` is an error (it used to run the built-in tiny model without a
// word), and a path that is not a regular file -- a FIFO would block open()
// until a writer came, a directory cannot be mapped -- is named as such.
#pragma once
#include <string>

namespace ms::cli {

// Throws ms::Error naming `flag` and the path unless it is an existing
// regular file.
void require_regular_file(const std::string& path, const std::string& flag);

// -m as given: `given_flag` = the option appeared on the command line. Not
// given: the built-in tiny model's path (made on first use; one line on
// stderr unless quiet). Given: checked by require_regular_file.
std::string model_path_or_default(const std::string& path, bool given_flag, bool quiet);

}  // namespace ms::cli
