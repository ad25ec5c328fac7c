// The CUDA launchers (free functions of src/cuda's headers that take a
// cudaStream_t) and which registry cases cover each: the list
// launcher_coverage_test.cpp checks against the headers themselves (a new
// launcher without an entry fails), against the registry (every named
// "op/impl" must exist, in CUDA builds) and against README.md.
#pragma once
#include <string>
#include <vector>

namespace ms::backend_ops {

struct Launcher {
  std::string name;                     // "cuda::rmsnorm", "cuda::decode_long::launch" (overloads: one entry)
  std::string header;                   // under src/cuda
  std::vector<std::string> covered_by;  // "op/impl" of the registry (empty: uncovered)
  std::string uncovered_why;            // why not (uncovered entries only)
};

const std::vector<Launcher>& cuda_launchers();

// Free functions taking a cudaStream_t in one header's text, named with
// their namespaces less the leading "ms::" ("cuda::rmsnorm"). Comments,
// preprocessor lines and the members of classes and structs are skipped.
std::vector<std::string> launchers_declared_in(const std::string& header_text);

}  // namespace ms::backend_ops
