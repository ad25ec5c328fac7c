// The perf mode of test_backend_ops (perf_cuda.cpp): `--perf [substring]`
// times the CUDA ops at the benchmark models' shapes (rows whose "model op
// shape" contains the substring, all without one) and prints a table.
// Returns the process exit code (2: no CUDA build or device).
#pragma once
#include <string>

namespace ms::backend_ops {

int run_perf(const std::string& filter);

}  // namespace ms::backend_ops
