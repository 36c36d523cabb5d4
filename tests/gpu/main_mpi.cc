// yali-gpu-tests-mpi: the same cases as yali-gpu-tests, one MPI rank per GPU (one machine).
//
//   mpirun -np 4 yali-gpu-tests-mpi [--filter S] [--quick] [--share-gpus]
//
// The communicator's rank is the MPI rank; the GPU is the rank on this node (MPI_COMM_TYPE_SHARED),
// modulo the visible GPUs with --share-gpus (which ctest passes: a machine with fewer GPUs than
// ranks then runs them sharing GPUs, and rank 0 prints a NOTE line saying so).
// Unique ids go from rank 0 to the others through the World's allgather (MPI_Allgather). All cases
// run in these processes one after another; each is bounded by the in-process watchdog, which ends
// the whole job (MPI_Abort) when a case hangs.
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "suite.h"

namespace yt {
namespace {

class MpiWorld : public World {
 public:
  MpiWorld() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void barrier() override { MPI_Barrier(MPI_COMM_WORLD); }
  void allgather(const void* mine, void* all, size_t bytes) override {
    MPI_Allgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
  }

 private:
  int rank_ = 0, size_ = 1;
};

void abortJob(int code) { MPI_Abort(MPI_COMM_WORLD, code); }

}  // namespace
}  // namespace yt

int main(int argc, char** argv) {
  using namespace yt;
  MPI_Init(&argc, &argv);
  setvbuf(stdout, nullptr, _IOLBF, 0);
  gFatalHook = abortJob;
  MpiWorld world;
  const int rank = world.rank(), size = world.size();
  MPI_Comm nodeComm;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &nodeComm);
  int localRank = 0, localSize = 1;
  MPI_Comm_rank(nodeComm, &localRank);
  MPI_Comm_size(nodeComm, &localSize);
  MPI_Comm_free(&nodeComm);

  Options opt;
  if (!parseOptions(argc, argv, /*mpi=*/true, &opt)) {
    MPI_Finalize();
    return 2;
  }
  if (opt.list) {
    if (rank == 0) {
      for (const CaseDef& c : allCases()) std::printf("%-16s %s\n", c.name, c.what);
    }
    MPI_Finalize();
    return 0;
  }

  // Every rank decides alike whether the run is possible.
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) count = 0;
  int minCount = 0;
  MPI_Allreduce(&count, &minCount, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  std::string skip;
  if (minCount == 0) {
    skip = std::string("no CUDA GPU visible (") +
           (e != cudaSuccess ? std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e)
                             : std::string("cudaGetDeviceCount returned 0 on some rank")) + ")";
  } else if (size != localSize) {
    skip = "the MPI ranks span several nodes; YALI works inside one machine";
  } else if (localSize > minCount && !opt.shareGpus) {
    skip = std::to_string(size) + " ranks need " + std::to_string(size) + " GPUs, " +
           std::to_string(minCount) + " visible";
  } else if (size < 2 || size > 8) {
    skip = "needs 2..8 MPI ranks, got " + std::to_string(size);
  } else if (opt.ranks > 0 && opt.ranks != size) {
    skip = "--ranks " + std::to_string(opt.ranks) + " differs from the MPI world size " +
           std::to_string(size);
  }
  if (!skip.empty()) {
    if (rank == 0) std::printf("SKIP: %s\n", skip.c_str());
    MPI_Finalize();
    return kExitSkip;
  }
  if (rank == 0) {
    std::printf("yali-gpu-tests-mpi: %d ranks (%d visible GPUs), seed 0x%llx%s\n", size, minCount,
                (unsigned long long)opt.seed, opt.quick ? ", quick" : "");
    if (size > minCount) {
      std::printf("NOTE: %d GPU(s) for %d ranks: ranks share GPUs (correctness only; timings mean "
                  "nothing)\n", minCount, size);
    }
  }

  int passed = 0, failed = 0, skipped = 0;
  std::vector<std::string> failures;
  for (const CaseDef& c : allCases()) {
    if (!caseSelected(c, opt)) continue;
    double t0 = MPI_Wtime();
    int code = runCaseHere(&world, Mode::Mpi, size, opt, c, {rank},
                           {deviceOfRank(opt, localRank, size, minCount)});
    std::vector<int> codes(size);
    MPI_Allgather(&code, 1, MPI_INT, codes.data(), 1, MPI_INT, MPI_COMM_WORLD);
    int pass = 0, skp = 0;
    for (int v : codes) {
      pass += v == kExitPass;
      skp += v == kExitSkip;
    }
    const char* tag = pass == size ? "PASS" : skp == size ? "SKIP" : "FAIL";
    if (rank == 0) {
      std::printf("%s  %-16s %-6s %d ranks  %6.1f s\n", tag, c.name, "mpi", size, MPI_Wtime() - t0);
    }
    if (pass == size) ++passed;
    else if (skp == size) ++skipped;
    else {
      ++failed;
      failures.push_back(c.name);
    }
  }
  if (rank == 0) {
    if (!failures.empty()) {
      std::printf("failed:");
      for (const std::string& f : failures) std::printf(" %s (mpi)", f.c_str());
      std::printf("\n");
    }
    std::printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
  }
  std::fflush(stdout);
  MPI_Finalize();
  if (failed > 0) return 1;
  if (passed == 0 && skipped > 0) return kExitSkip;
  return 0;
}
