#!/usr/bin/env bash
# Builds nccl-tests 2.19.6 from the tarball beside this script, with MPI, against the NCCL inside the
# GPU machines' torch venv (or NCCL_HOME if set). Usage: build-nccl-tests.sh DEST_DIR
# Binaries land in DEST_DIR/nccl-tests-2.19.6/build/*_perf. To put several ranks on one GPU:
#   mpirun --allow-run-as-root --oversubscribe -np 3 -x LD_LIBRARY_PATH WRAP .../all_reduce_perf -g 1 -c 1 ...
# where WRAP exports NCCL_HOSTID=host$OMPI_COMM_WORLD_RANK NCCL_TESTS_DEVICE=0 and execs "$@".
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
DEST=${1:?usage: build-nccl-tests.sh DEST_DIR}
mkdir -p "$DEST/.homes"
if [ -z "${NCCL_HOME:-}" ]; then
  P=$(python3 -c "import nvidia.nccl; print(nvidia.nccl.__path__[0])")
  mkdir -p "$DEST/.homes/nccl/lib"; ln -sfn "$P/include" "$DEST/.homes/nccl/include"
  ln -sf "$P/lib/libnccl.so.2" "$DEST/.homes/nccl/lib/libnccl.so"; NCCL_HOME=$DEST/.homes/nccl
  echo "NCCL from $P (add $P/lib to LD_LIBRARY_PATH when running)"
fi
echo "mpi.h found: $(find / -name mpi.h -not -path '/proc/*' 2>/dev/null | grep -v python | tr '\n' ' ')"
INC=$(mpicc --showme:incdirs 2>/dev/null | awk '{print $1}'); [ -f "$INC/mpi.h" ] || INC=$(dirname "$(find / -name mpi.h -not -path '/proc/*' 2>/dev/null | grep -v python | grep -i openmpi | head -1)")
echo "MPI include: $INC"
LIBD=$(dirname "$(find / -name 'libmpi.so*' -not -path '/proc/*' 2>/dev/null | head -1)")
mkdir -p "$DEST/.homes/mpi"; ln -sfn "$INC" "$DEST/.homes/mpi/include"; ln -sfn "$LIBD" "$DEST/.homes/mpi/lib"
tar xzf "$HERE/nccl-tests-2.19.6.tar.gz" -C "$DEST"
make -C "$DEST/nccl-tests-2.19.6" -j "$(nproc)" MPI=1 MPI_HOME="$DEST/.homes/mpi" NCCL_HOME="$NCCL_HOME" \
  CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}" NVCC_GENCODE="${NVCC_GENCODE:--gencode=arch=compute_90,code=sm_90}"
