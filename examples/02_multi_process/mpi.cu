// Example 2 (MPI): mpirun -np 4 ./yali-example-02-mpi
// Rank 0 makes the unique id and MPI_Bcast hands it to everyone; each rank drives one GPU.
#include <cuda_runtime.h>
#include <mpi.h>
#include <stdio.h>

#include <vector>

#include "yali/yali.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  int ngpus = 0;
  cudaGetDeviceCount(&ngpus);
  if (ngpus == 0) {
    if (rank == 0) printf("SKIP: no GPU\n");
    MPI_Finalize();
    return 0;
  }
  cudaSetDevice(rank % ngpus);

  yaliUniqueId id;
  if (rank == 0) yaliGetUniqueId(&id);
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  yaliComm_t comm;
  if (yaliCommInitRank(&comm, nranks, id, rank) != yaliSuccess) {
    fprintf(stderr, "rank %d: %s\n", rank, yaliGetLastError(nullptr));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }

  const size_t count = 4096 + 1;
  std::vector<float> host(count, static_cast<float>(rank + 1));
  float* buf;
  cudaMalloc(&buf, count * sizeof(float));
  cudaMemcpy(buf, host.data(), count * sizeof(float), cudaMemcpyHostToDevice);
  yaliAllReduce(buf, buf, count, yaliFloat32, yaliSum, comm, cudaStreamDefault);
  cudaMemcpy(host.data(), buf, count * sizeof(float), cudaMemcpyDeviceToHost);
  int wrong = 0;
  for (float v : host) wrong += v != nranks * (nranks + 1) / 2.0f;
  int totalWrong = 0;
  MPI_Reduce(&wrong, &totalWrong, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0) printf("%s: MPI AllReduce on %d ranks, %d wrong\n", totalWrong ? "FAIL" : "PASS", nranks, totalWrong);
  yaliCommDestroy(comm);
  cudaFree(buf);
  MPI_Finalize();
  return totalWrong ? 1 : 0;
}
