// CK(call): the stand-alone CUDA benchmarks' check of a runtime call (prints
// the failing call and exits). They build with a bare `nvcc file.cu`, without
// the engine's libraries, so they do not use cuda/device.h's MS_CUDA_CHECK.
#pragma once
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CK(x)                                                                                   \
  do {                                                                                          \
    cudaError_t e_ = (x);                                                                       \
    if (e_ != cudaSuccess) {                                                                    \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)
