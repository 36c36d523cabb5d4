// NCCL through the Backend interface: the baseline. Built only when CMake found NCCL
// (YALI_PERF_HAVE_NCCL); libyali itself never needs NCCL.
#include "backend.h"

#ifdef YALI_PERF_HAVE_NCCL

#include <nccl.h>

#include <cstring>

#include "cuda_check.h"
#include "perf_error.h"

namespace yali_perf {
namespace {

ncclDataType_t ToNccl(DType dtype) {
  switch (dtype) {
    case DType::kFloat: return ncclFloat32;
    case DType::kHalf: return ncclFloat16;
    case DType::kBfloat16: return ncclBfloat16;
  }
  return ncclFloat32;
}

ncclRedOp_t ToNccl(RedOp op) {
  switch (op) {
    case RedOp::kSum: return ncclSum;
    case RedOp::kProd: return ncclProd;
    case RedOp::kMax: return ncclMax;
    case RedOp::kMin: return ncclMin;
    case RedOp::kAvg: return ncclAvg;
  }
  return ncclSum;
}

class NcclBackend final : public Backend {
 public:
  const char* Name() const override { return "nccl"; }

  int VersionCode() const override {
    int version = 0;
    Check(ncclGetVersion(&version), "ncclGetVersion", nullptr);
    return version;
  }

  std::string VersionText() const override {
    // Since NCCL 2.9 the code is major*10000 + minor*100 + patch; before, major*1000 + minor*100.
    int code = VersionCode();
    if (code >= 20900)
      return std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." +
             std::to_string(code % 100);
    return std::to_string(code / 1000) + "." + std::to_string(code / 100 % 10) + "." +
           std::to_string(code % 100);
  }

  void InitAll(const std::vector<int>& devices) override {
    devices_ = devices;
    comms_.assign(devices.size(), nullptr);
    Check(ncclCommInitAll(comms_.data(), static_cast<int>(devices.size()), devices.data()),
          "ncclCommInitAll", nullptr);
  }

  std::string NewUniqueId() override {
    ncclUniqueId id;
    Check(ncclGetUniqueId(&id), "ncclGetUniqueId", nullptr);
    return std::string(id.internal, sizeof(id.internal));
  }

  void InitRank(const std::string& unique_id, int nranks, int rank, int device) override {
    if (unique_id.size() != sizeof(ncclUniqueId))
      Fatal("nccl unique id from rank 0 has " + std::to_string(unique_id.size()) + " bytes, not " +
            std::to_string(sizeof(ncclUniqueId)));
    ncclUniqueId id;
    std::memcpy(id.internal, unique_id.data(), sizeof(id.internal));
    YALI_PERF_CUDA(cudaSetDevice(device));
    devices_.assign(1, device);
    comms_.assign(1, nullptr);
    Check(ncclCommInitRank(&comms_[0], nranks, id, rank), "ncclCommInitRank", nullptr);
  }

  void GroupStart() override { Check(ncclGroupStart(), "ncclGroupStart", nullptr); }
  void GroupEnd() override { Check(ncclGroupEnd(), "ncclGroupEnd", nullptr); }

  void AllReduce(int local, const void* send, void* recv, size_t count, DType dtype, RedOp op,
                 cudaStream_t stream) override {
    ncclResult_t result =
        ncclAllReduce(send, recv, count, ToNccl(dtype), ToNccl(op), comms_[local], stream);
    if (result != ncclSuccess) {
      Check(result,
            "ncclAllReduce(count " + std::to_string(count) + ", " + DTypeName(dtype) + ", " +
                RedOpName(op) + ", local comm " + std::to_string(local) + ")",
            comms_[local]);
    }
  }

  // ncclCommRegister (NCCL >= 2.19) is local, not collective; NCCL uses a registration only when
  // every rank passes registered buffers, which -R 1 guarantees by registering the same buffers
  // on every rank.
  void RegisterBuffers(const std::vector<std::vector<void*>>& buffers, size_t bytes) override {
#if NCCL_VERSION_CODE >= 21900
    handles_.assign(comms_.size(), std::vector<void*>());
    for (size_t local = 0; local < comms_.size(); ++local) {
      YALI_PERF_CUDA(cudaSetDevice(devices_[local]));
      for (size_t k = 0; k < buffers[local].size(); ++k) {
        void* handle = nullptr;
        Check(ncclCommRegister(comms_[local], buffers[local][k], bytes, &handle),
              "ncclCommRegister(buffer " + std::to_string(k) + ", " + std::to_string(bytes) +
                  " bytes, local comm " + std::to_string(local) + ")",
              comms_[local]);
        handles_[local].push_back(handle);
      }
    }
#else
    Fatal("-R 1: this yali-perf was built against NCCL " + std::to_string(NCCL_VERSION_CODE) +
          ", which has no ncclCommRegister (NCCL 2.19 or later); run -R 0 or --impl yali");
#endif
  }

  void DeregisterBuffers() override {
#if NCCL_VERSION_CODE >= 21900
    for (size_t local = 0; local < handles_.size(); ++local) {
      YALI_PERF_CUDA(cudaSetDevice(devices_[local]));
      for (size_t k = 0; k < handles_[local].size(); ++k) {
        Check(ncclCommDeregister(comms_[local], handles_[local][k]),
              "ncclCommDeregister(buffer " + std::to_string(k) + ", local comm " +
                  std::to_string(local) + ")",
              comms_[local]);
      }
    }
    handles_.clear();
#endif
  }

  double AccumulationEpsilon(DType dtype) const override { return DTypeEpsilon(dtype); }

  bool HasAsyncError(int local, std::string* message) override {
    ncclResult_t async = ncclSuccess;
    ncclResult_t result = ncclCommGetAsyncError(comms_[local], &async);
    if (result != ncclSuccess) async = result;
    if (async == ncclSuccess || async == ncclInProgress) return false;
    *message = Describe("nccl communicator", async, comms_[local]);
    return true;
  }

  void AbortAll() override {
    for (ncclComm_t& comm : comms_) {
      if (comm != nullptr) ncclCommAbort(comm);
      comm = nullptr;
    }
    comms_.clear();
    handles_.clear();  // the abort released the registrations with the comms
  }

  void DestroyAll() override {
    // Comms from ncclCommInitAll may be destroyed one after another from one thread.
    for (size_t i = 0; i < comms_.size(); ++i) {
      ncclResult_t result = ncclCommDestroy(comms_[i]);
      comms_[i] = nullptr;
      if (result != ncclSuccess)
        Fatal(Describe("ncclCommDestroy (local comm " + std::to_string(i) + ")", result, nullptr));
    }
    comms_.clear();
  }

 private:
  static std::string Describe(const std::string& call, ncclResult_t result, ncclComm_t comm) {
    std::string text = call + " failed: result " + std::to_string(static_cast<int>(result)) +
                       " (" + ncclGetErrorString(result) + ")";
#if NCCL_VERSION_CODE >= 21300
    const char* detail = ncclGetLastError(comm);
    if (detail != nullptr && *detail != '\0') text += ": " + std::string(detail);
#endif
    return text;
  }

  static void Check(ncclResult_t result, const std::string& call, ncclComm_t comm) {
    if (result != ncclSuccess) Fatal(Describe(call, result, comm));
  }

  std::vector<ncclComm_t> comms_;
  std::vector<int> devices_;                 // per local comm
  std::vector<std::vector<void*>> handles_;  // per local comm, in registration order
};

}  // namespace

std::unique_ptr<Backend> MakeNcclBackend(std::string* reason) {
  return std::unique_ptr<Backend>(new NcclBackend());
}

}  // namespace yali_perf

#else  // !YALI_PERF_HAVE_NCCL

#ifndef YALI_PERF_NCCL_MISSING_REASON
#define YALI_PERF_NCCL_MISSING_REASON "nccl.h and libnccl were not found when yali-perf was configured"
#endif

namespace yali_perf {

std::unique_ptr<Backend> MakeNcclBackend(std::string* reason) {
  *reason = YALI_PERF_NCCL_MISSING_REASON;
  return nullptr;
}

}  // namespace yali_perf

#endif  // YALI_PERF_HAVE_NCCL
