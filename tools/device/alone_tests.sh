# Sourced by the GPU-suite scripts: `alone`, the GPU tests that read the device's global memory in
# use (cudaMemGetInfo), which other test processes on the GPU would disturb, so that they run
# alone after the shards.
alone='BucketedTrainerGpuTest.ThreeBucketsTakeAtMostATenthMoreDeviceMemoryThanTheLargestAlone'
alone+=':ForwardRunnerGpuTest.RunnersLeakNoDeviceMemory:Gpt2DecodeGpuTest.GeneratorsLeakNoDeviceMemory'
alone+=':TrainerGpuTest.CreatingAndDestroyingTrainersLeaksNoDeviceMemory'
alone+=':LaneWorkspacesGpuTest.BacksWhatIsNeededAndReleasesTheRest'
alone+=':BenchJsonGpuTest.*'  # reprise-bench's device_bytes: memory in use after minus before.
