/* test_gpu.h — what the tests that talk to a GPU share: skipping where there is none, and checked CUDA calls. */
#ifndef LCT_TEST_GPU_H
#define LCT_TEST_GPU_H

#include <criterion/criterion.h>
#include <cuda_runtime_api.h>

/* The calling test is skipped (not failed) where no CUDA device is present: CI builds, then skips. */
#define NEED_GPU()                                                                          \
  do {                                                                                      \
    int n_ = 0;                                                                             \
    if (cudaGetDeviceCount(&n_) != cudaSuccess || n_ == 0) cr_skip_test("no CUDA device"); \
  } while (0)

#define CUDA_CHECK(call) cr_assert_eq((call), cudaSuccess, "%s", #call)

#endif
