# The commands a newcomer runs. Everything builds with CMake into $(BUILD).
BUILD ?= build
CMAKE_ARGS ?=
JOBS ?= $(shell nproc)
PYTHON ?= python3
# NVLink multicast stays off on shared machines (see README).
export NCCL_NVLS_ENABLE=0
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export NVSHMEM_DISABLE_NVLS=1
export YALI_LIBRARY ?= $(abspath $(BUILD))/src/libyali.so
export PYTHONPATH := $(abspath python)$(if $(PYTHONPATH),:$(PYTHONPATH))

.PHONY: build bench test host-test gpu-test sweep clean

build:
	cmake -S . -B $(BUILD) -G Ninja $(CMAKE_ARGS)
	cmake --build $(BUILD) -j $(JOBS)

# YALI vs NCCL AllReduce on every visible GPU, 4 KB to 1 GB, fp32 and bf16.
bench: build
	bash scripts/bench.sh $(BUILD)

# Host tests always; GPU tests when GPUs are visible (a clear SKIP line otherwise).
test: build
	bash scripts/test.sh $(BUILD)

# Hardware baseline, examples, YALI vs NCCL over sizes, dtypes and modes, then the report under
# output/: SWEEP_ARGS=--quick, --standard (default) or --extensive (~6 minutes on 4 H200s).
sweep: build
	$(PYTHON) -m yali.sweep --build $(BUILD) $(SWEEP_ARGS)

clean:
	rm -rf $(BUILD)
