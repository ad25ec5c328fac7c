// test_backend_ops's entry: the GoogleTest suite, or with --perf the
// CUDA ops' timing table (perf_cuda.cpp), which the test suite never runs.
#include <gtest/gtest.h>

#include <string>

#include "backend_ops/perf.h"

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--perf") return ms::backend_ops::run_perf(i + 1 < argc ? argv[i + 1] : "");
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
