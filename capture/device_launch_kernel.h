// The kernel of the device-launch launcher graph (capture/device_launch.h), compiled by nvcc with
// relocatable device code and the device runtime (cudadevrt) in device_launch.cu. This header
// stays free of everything nvcc need not see.
#ifndef REPRISE_CAPTURE_DEVICE_LAUNCH_KERNEL_H_
#define REPRISE_CAPTURE_DEVICE_LAUNCH_KERNEL_H_

#include <cuda_runtime_api.h>

namespace reprise::capture::internal {

// The __global__ function TailLaunchStep(cudaGraphExec_t step, int* fault), for a kernel node: one
// thread tail-launches `step` (cudaStreamGraphTailLaunch); if the device refuses, it writes the
// cudaError_t to `fault` (mapped pinned host memory) and traps, so that the stream fails rather
// than skip the step.
const void* TailLaunchStepKernel();

}  // namespace reprise::capture::internal

#endif  // REPRISE_CAPTURE_DEVICE_LAUNCH_KERNEL_H_
