# sentinels of the tree under test (the device's .git is stale)
echo "sentinel red.add=$(grep -c 'red.relaxed.gpu.global.add.u64' src/collectives/common/device.cuh) HierRun=$(grep -c HierRun src/nccl_abi/intercept.cc) setupTimeout=$(grep -c YALI_TIMEOUT_MS src/nccl_abi/comm.cc) eagerDrained=$(grep -rc eagerDrained src/core/comm.cc)"
