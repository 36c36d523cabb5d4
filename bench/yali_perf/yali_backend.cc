// YALI through the Backend interface.
#include <yali/yali.h>

#include <cstring>
#include <thread>

#include "backend.h"
#include "cuda_check.h"
#include "perf_error.h"

namespace yali_perf {

namespace {

yaliDataType_t ToYali(DType dtype) {
  switch (dtype) {
    case DType::kFloat: return yaliFloat32;
    case DType::kHalf: return yaliFloat16;
    case DType::kBfloat16: return yaliBfloat16;
  }
  return yaliFloat32;
}

yaliRedOp_t ToYali(RedOp op) {
  switch (op) {
    case RedOp::kSum: return yaliSum;
    case RedOp::kProd: return yaliProd;
    case RedOp::kMax: return yaliMax;
    case RedOp::kMin: return yaliMin;
    case RedOp::kAvg: return yaliAvg;
  }
  return yaliSum;
}

class YaliBackend final : public Backend {
 public:
  const char* Name() const override { return "yali"; }

  int VersionCode() const override {
    int version = 0;
    Check(yaliGetVersion(&version), "yaliGetVersion", nullptr);
    return version;
  }

  std::string VersionText() const override {
    int code = VersionCode();
    return std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." +
           std::to_string(code % 100);
  }

  void InitAll(const std::vector<int>& devices) override {
    devices_ = devices;
    comms_.assign(devices.size(), nullptr);
    Check(yaliCommInitAll(comms_.data(), static_cast<int>(devices.size()), devices.data()),
          "yaliCommInitAll", nullptr);
  }

  std::string NewUniqueId() override {
    yaliUniqueId id;
    Check(yaliGetUniqueId(&id), "yaliGetUniqueId", nullptr);
    return std::string(id.internal, sizeof(id.internal));
  }

  void InitRank(const std::string& unique_id, int nranks, int rank, int device) override {
    if (unique_id.size() != sizeof(yaliUniqueId))
      Fatal("yali unique id from rank 0 has " + std::to_string(unique_id.size()) + " bytes, not " +
            std::to_string(sizeof(yaliUniqueId)));
    yaliUniqueId id;
    std::memcpy(id.internal, unique_id.data(), sizeof(id.internal));
    YALI_PERF_CUDA(cudaSetDevice(device));
    devices_.assign(1, device);
    comms_.assign(1, nullptr);
    Check(yaliCommInitRank(&comms_[0], nranks, id, rank), "yaliCommInitRank", nullptr);
  }

  void GroupStart() override { Check(yaliGroupStart(), "yaliGroupStart", nullptr); }
  void GroupEnd() override { Check(yaliGroupEnd(), "yaliGroupEnd", nullptr); }

  void AllReduce(int local, const void* send, void* recv, size_t count, DType dtype, RedOp op,
                 cudaStream_t stream) override {
    yaliResult_t result =
        yaliAllReduce(send, recv, count, ToYali(dtype), ToYali(op), comms_[local], stream);
    if (result != yaliSuccess) {
      Check(result,
            "yaliAllReduce(count " + std::to_string(count) + ", " + DTypeName(dtype) + ", " +
                RedOpName(op) + ", local comm " + std::to_string(local) + ")",
            comms_[local]);
    }
  }

  AlgoChoice DescribeAllReduce(int local, const void* send, const void* recv, size_t count,
                               DType dtype, RedOp op) override {
    yaliAlgoInfo_t info;
    std::memset(&info, 0, sizeof(info));
    Check(yaliAllReduceAlgoInfo(comms_[local], send, recv, count, ToYali(dtype), ToYali(op), &info),
          "yaliAllReduceAlgoInfo", comms_[local]);
    AlgoChoice choice;
    choice.known = true;
    choice.algorithm.assign(info.algorithm, strnlen(info.algorithm, sizeof(info.algorithm)));
    choice.ctas = info.ctas;
    choice.threads = info.threads;
    choice.chunk_bytes = info.chunkBytes;
    return choice;
  }

  void RegisterBuffers(const std::vector<std::vector<void*>>& buffers, size_t bytes) override {
    // yaliCommRegister is collective and pairs each rank's k-th registration with its peers'
    // k-th. Registering buffer k on every local comm before buffer k+1 keeps the order the same
    // on every comm, however a single process's comms are matched (yali.h lets one thread loop
    // over them).
    const size_t per_rank = buffers.empty() ? 0 : buffers[0].size();
    handles_.assign(comms_.size(), std::vector<void*>());
    for (size_t k = 0; k < per_rank; ++k) {
      for (size_t local = 0; local < comms_.size(); ++local) {
        YALI_PERF_CUDA(cudaSetDevice(devices_[local]));
        void* handle = nullptr;
        Check(yaliCommRegister(comms_[local], buffers[local][k], bytes, &handle),
              "yaliCommRegister(buffer " + std::to_string(k) + ", " + std::to_string(bytes) +
                  " bytes, local comm " + std::to_string(local) + ")",
              comms_[local]);
        handles_[local].push_back(handle);
      }
    }
  }

  void DeregisterBuffers() override {
    // Collective like the registration: the same order on every rank.
    const size_t per_rank = handles_.empty() ? 0 : handles_[0].size();
    for (size_t k = 0; k < per_rank; ++k) {
      for (size_t local = 0; local < comms_.size(); ++local) {
        YALI_PERF_CUDA(cudaSetDevice(devices_[local]));
        Check(yaliCommDeregister(comms_[local], handles_[local][k]),
              "yaliCommDeregister(buffer " + std::to_string(k) + ", local comm " +
                  std::to_string(local) + ")",
              comms_[local]);
      }
    }
    handles_.clear();
  }

  double AccumulationEpsilon(DType dtype) const override { return DTypeEpsilon(DType::kFloat); }

  bool HasAsyncError(int local, std::string* message) override {
    yaliResult_t async = yaliSuccess;
    yaliResult_t result = yaliCommGetAsyncError(comms_[local], &async);
    if (result != yaliSuccess) async = result;
    if (async == yaliSuccess) return false;
    *message = Describe("yali communicator", async, comms_[local]);
    return true;
  }

  void AbortAll() override {
    for (yaliComm_t& comm : comms_) {
      if (comm != nullptr) yaliCommAbort(comm);
      comm = nullptr;
    }
    comms_.clear();
    handles_.clear();  // the abort released the registrations with the comms
  }

  void DestroyAll() override {
    // yaliCommDestroy is collective (peers' memory stays mapped until every rank has called it).
    // Destroying the comms of one process one after another from one thread would be fine if
    // the call returns before its peers arrive, and a deadlock if it waits: one thread per comm
    // is right either way.
    std::vector<yaliResult_t> results(comms_.size(), yaliSuccess);
    std::vector<std::thread> threads;
    for (size_t i = 0; i < comms_.size(); ++i)
      threads.emplace_back([this, i, &results] { results[i] = yaliCommDestroy(comms_[i]); });
    for (std::thread& thread : threads) thread.join();
    for (size_t i = 0; i < comms_.size(); ++i) {
      if (results[i] != yaliSuccess)
        Fatal(Describe("yaliCommDestroy (local comm " + std::to_string(i) + ")", results[i],
                       nullptr));
    }
    comms_.clear();
  }

 private:
  static std::string Describe(const std::string& call, yaliResult_t result, yaliComm_t comm) {
    std::string detail = yaliGetLastError(comm);
    if (detail.empty() && comm != nullptr) detail = yaliGetLastError(nullptr);
    std::string text = call + " failed: result " + std::to_string(static_cast<int>(result)) +
                       " (" + yaliGetErrorString(result) + ")";
    if (!detail.empty()) text += ": " + detail;
    return text;
  }

  static void Check(yaliResult_t result, const std::string& call, yaliComm_t comm) {
    if (result != yaliSuccess) Fatal(Describe(call, result, comm));
  }

  std::vector<yaliComm_t> comms_;
  std::vector<int> devices_;                 // per local comm
  std::vector<std::vector<void*>> handles_;  // per local comm, in registration order
};

}  // namespace

std::unique_ptr<Backend> MakeYaliBackend() { return std::unique_ptr<Backend>(new YaliBackend()); }

}  // namespace yali_perf
