/* fault_inject.h — test builds only (lctd-faults): the backend's Nth codec call meets a lost device. */
#ifndef LCT_SERVER_FAULT_INJECT_H
#define LCT_SERVER_FAULT_INJECT_H

#include "backend.h"

/* When $LCT_FAULT_AT is a number N >= 1, wraps be's codec calls (encode,
 * decode, the device batches; counted over every worker) so that the Nth
 * meets a lost device. On cuda that call first launches a kernel that writes
 * through a null pointer and waits for it: a real sticky illegal-address
 * error, which the backend then meets and reports itself. The cpu backend has
 * no device to lose: the call and every later one fail with LCT_EIO and its
 * fault op reports the injection. */
void lct__fault_inject(lct__backend *be);

#ifdef LCT_HAVE_CUDA
/* Launches the faulting kernel and waits for it (fault_kernel.cu). */
void lct__fault_cuda(void);
#endif

#endif
