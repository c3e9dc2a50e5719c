/* fault_kernel.cu — test builds only (lctd-faults): a kernel that writes through a null pointer, for a real sticky illegal-address error. */
#include <cuda_runtime_api.h>

__global__ void lct__fault_write(volatile int *p) { p[threadIdx.x] = 1; }

extern "C" void lct__fault_cuda(void) {
  lct__fault_write<<<1, 32>>>(nullptr);
  /* Its error is the context's from here on: the backend meets it at its next call. */
  (void)cudaDeviceSynchronize();
}
