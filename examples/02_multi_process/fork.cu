// Example 2: one process per GPU, the way mpirun or torchrun run programs.
//
// The unique id is made once and handed to every rank; here the parent makes it and forks one
// child per GPU (the children inherit it). With MPI you would MPI_Bcast it (see mpi.cu); with
// torch.distributed, broadcast its 128 bytes. Note: the parent must not initialise CUDA before
// fork(); yaliGetUniqueId does not.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vector>

#include "yali/yali.h"

static int runRank(int rank, int nranks, yaliUniqueId id) {
  if (cudaSetDevice(rank) != cudaSuccess) return 1;
  yaliComm_t comm;
  yaliResult_t r = yaliCommInitRank(&comm, nranks, id, rank);
  if (r != yaliSuccess) {
    fprintf(stderr, "rank %d: yaliCommInitRank: %s\n", rank, yaliGetLastError(nullptr));
    return 1;
  }
  const size_t count = 1000003;  // prime: no size is special
  std::vector<float> host(count);
  for (size_t i = 0; i < count; ++i) host[i] = static_cast<float>(rank) + 0.25f * (i % 4);
  float *send, *recv;
  cudaMalloc(&send, count * sizeof(float));
  cudaMalloc(&recv, count * sizeof(float));
  cudaMemcpy(send, host.data(), count * sizeof(float), cudaMemcpyHostToDevice);
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  r = yaliAllReduce(send, recv, count, yaliFloat32, yaliSum, comm, stream);
  if (r != yaliSuccess) {
    fprintf(stderr, "rank %d: yaliAllReduce: %s\n", rank, yaliGetLastError(comm));
    return 1;
  }
  cudaStreamSynchronize(stream);
  yaliResult_t async;
  yaliCommGetAsyncError(comm, &async);
  cudaMemcpy(host.data(), recv, count * sizeof(float), cudaMemcpyDeviceToHost);
  size_t wrong = async == yaliSuccess ? 0 : count;
  for (size_t i = 0; i < count && async == yaliSuccess; ++i) {
    float expected = nranks * (nranks - 1) / 2.0f + nranks * 0.25f * (i % 4);
    if (host[i] != expected) ++wrong;
  }
  yaliCommDestroy(comm);
  printf("rank %d: %zu wrong\n", rank, wrong);
  return wrong ? 1 : 0;
}

int main(int argc, char** argv) {
  // Ask a child how many GPUs there are, so this process never initialises CUDA.
  int fds[2];
  if (pipe(fds) != 0) return 1;
  if (fork() == 0) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
    (void)!write(fds[1], &n, sizeof(n));
    _exit(0);
  }
  int ngpus = 0;
  (void)!read(fds[0], &ngpus, sizeof(ngpus));
  wait(nullptr);
  int nranks = argc > 1 ? atoi(argv[1]) : (ngpus > 8 ? 8 : ngpus);
  if (nranks < 2 || nranks > ngpus) {
    printf("SKIP: needs 2 or more GPUs (found %d)\n", ngpus);
    return 0;
  }
  yaliUniqueId id;
  if (yaliGetUniqueId(&id) != yaliSuccess) return 1;
  std::vector<pid_t> children;
  for (int rank = 0; rank < nranks; ++rank) {
    pid_t pid = fork();
    if (pid == 0) _exit(runRank(rank, nranks, id));
    children.push_back(pid);
  }
  int failures = 0;
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failures;
  }
  printf("%s: AllReduce with %d processes\n", failures ? "FAIL" : "PASS", nranks);
  return failures ? 1 : 0;
}
