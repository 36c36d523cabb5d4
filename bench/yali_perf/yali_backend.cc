// YALI through the Backend interface.
#include <yali/yali.h>

#include <cstring>
#include <thread>

#include "backend.h"
#include "coll_shape.h"
#include "cuda_check.h"
#include "perf_error.h"

namespace yali_perf {

namespace {

yaliDataType_t ToYali(DType dtype) {
  switch (dtype) {
    case DType::kFloat: return yaliFloat32;
    case DType::kHalf: return yaliFloat16;
    case DType::kBfloat16: return yaliBfloat16;
    case DType::kInt8: return yaliInt8;
    case DType::kUint8: return yaliUint8;
    case DType::kInt32: return yaliInt32;
    case DType::kUint32: return yaliUint32;
    case DType::kInt64: return yaliInt64;
    case DType::kUint64: return yaliUint64;
    case DType::kDouble: return yaliFloat64;
    case DType::kF8e4m3: return yaliFloat8e4m3;
    case DType::kF8e5m2: return yaliFloat8e5m2;
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

// CollId's first eight values are yaliCollective_t's (perf_args.h); sendrecv has none.
yaliCollective_t ToYali(CollId coll) { return static_cast<yaliCollective_t>(static_cast<int>(coll)); }

// "yaliReduceScatter(count 1024, float, sum, root 0, local comm 1)": what a refusal or a failure
// names.
std::string CallText(const char* function, const LibraryCall& call, int local) {
  std::string text = std::string(function) + "(count " + std::to_string(call.count) + ", " +
                     DTypeName(call.dtype);
  if (CollReduces(call.kind)) text += std::string(", ") + RedOpName(call.op);
  if (CollHasRoot(call.kind)) text += ", root " + std::to_string(call.root);
  if (call.kind == CollId::kSendRecv)
    text += ", to rank " + std::to_string(call.send_peer) + ", from rank " +
            std::to_string(call.recv_peer);
  return text + ", local comm " + std::to_string(local) + ")";
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

  bool Issue(int local, const LibraryCall& call, cudaStream_t stream,
             std::string* refusal) override {
    yaliComm_t comm = comms_[local];
    const yaliDataType_t type = ToYali(call.dtype);
    const yaliRedOp_t op = ToYali(call.op);
    const char* function = "?";
    yaliResult_t result = yaliInternalError;
    switch (call.kind) {
      case CollId::kAllReduce:
        function = "yaliAllReduce";
        result = yaliAllReduce(call.send, call.recv, call.count, type, op, comm, stream);
        break;
      case CollId::kReduceScatter:
        function = "yaliReduceScatter";
        result = yaliReduceScatter(call.send, call.recv, call.count, type, op, comm, stream);
        break;
      case CollId::kAllGather:
        function = "yaliAllGather";
        result = yaliAllGather(call.send, call.recv, call.count, type, comm, stream);
        break;
      case CollId::kBroadcast:
        function = "yaliBroadcast";
        result = yaliBroadcast(call.send, call.recv, call.count, type, call.root, comm, stream);
        break;
      case CollId::kReduce:
        function = "yaliReduce";
        result = yaliReduce(call.send, call.recv, call.count, type, op, call.root, comm, stream);
        break;
      case CollId::kGather:
        function = "yaliGather";
        result = yaliGather(call.send, call.recv, call.count, type, call.root, comm, stream);
        break;
      case CollId::kScatter:
        function = "yaliScatter";
        result = yaliScatter(call.send, call.recv, call.count, type, call.root, comm, stream);
        break;
      case CollId::kAlltoAll:
        function = "yaliAlltoAll";
        result = yaliAlltoAll(call.send, call.recv, call.count, type, comm, stream);
        break;
      case CollId::kSendRecv:
        return IssueSendRecv(local, call, stream, refusal);
      case CollId::kRsAg:
        Fatal("internal: rs_ag is not one library call");
      case CollId::kAlltoAllv:
        Fatal("internal: alltoallv is issued through IssueVar");
    }
    if (result == yaliSuccess) return true;  // the call's text only for a message, as NCCL's backend
    return Outcome(result, CallText(function, call, local), comm, refusal);
  }

  bool IssueVar(int local, const VarCall& call, cudaStream_t stream,
                std::string* refusal) override {
    yaliComm_t comm = comms_[local];
    const yaliDataType_t type = ToYali(call.dtype);
    yaliExpertLayout_t layout;
    std::memset(&layout, 0, sizeof(layout));
    layout.rowBytes = call.row_bytes;
    layout.localExperts = call.local_experts;
    layout.alignRows = call.align_rows;
    layout.capacityRows = call.capacity_rows;
    const char* function = "?";
    yaliResult_t result = yaliInternalError;
    // Displacements null: packed on both sides (the benchmark's layouts, alltoallv_plan.h).
    switch (call.form) {
      case VarForm::kHostCounts:
        function = "yaliAlltoAllv";
        result = yaliAlltoAllv(call.send, call.send_counts, nullptr, call.recv, call.recv_counts,
                               nullptr, type, comm, stream);
        break;
      case VarForm::kDeviceCounts:
        function = "yaliAlltoAllvDeviceCounts";
        result = yaliAlltoAllvDeviceCounts(call.send, call.device_send_counts, nullptr, call.recv,
                                           call.recv_capacity, call.device_recv_counts,
                                           call.device_recv_offsets, type, comm, stream);
        break;
      case VarForm::kExpertDispatch:
        function = "yaliExpertDispatch";
        result = yaliExpertDispatch(call.send, call.device_send_counts, call.recv,
                                    call.device_recv_counts, call.device_recv_offsets, &layout,
                                    comm, stream);
        break;
      case VarForm::kExpertCombine:
        function = "yaliExpertCombine";
        result = yaliExpertCombine(call.send, call.device_send_counts, call.recv, &layout, comm,
                                   stream);
        break;
    }
    if (result == yaliSuccess) return true;
    const std::string text = std::string(function) + "(" + DTypeName(call.dtype) + ", " +
                             std::to_string(call.local_experts) + " local expert(s), local comm " +
                             std::to_string(local) + ")";
    return Outcome(result, text, comm, refusal);
  }

  bool Precheck(int local, const LibraryCall& call, std::string* refusal) override {
    if (call.kind == CollId::kSendRecv) return PrecheckSendRecv(local, call, refusal);
    yaliAlgoInfo_t info;
    std::memset(&info, 0, sizeof(info));
    yaliResult_t result = yaliAlgoInfo(comms_[local], ToYali(call.kind), call.send, call.recv,
                                       call.count, ToYali(call.dtype), ToYali(call.op), call.root,
                                       &info);
    if (result == yaliSuccess) return true;
    if (result == yaliInvalidArgument) {
      *refusal = ErrorText(CallText("yaliAlgoInfo", call, local), result, comms_[local]);
      return false;
    }
    Check(result, CallText("yaliAlgoInfo", call, local), comms_[local]);
    return true;
  }

  AlgoChoice Describe(int local, const LibraryCall& call) override {
    // yaliAlgoInfo describes collectives; point-to-point calls choose no algorithm.
    if (call.kind == CollId::kSendRecv) return AlgoChoice();
    yaliAlgoInfo_t info;
    std::memset(&info, 0, sizeof(info));
    // Only for the report: a call it cannot describe (one that was refused) has no label.
    if (yaliAlgoInfo(comms_[local], ToYali(call.kind), call.send, call.recv, call.count,
                     ToYali(call.dtype), ToYali(call.op), call.root, &info) != yaliSuccess)
      return AlgoChoice();
    AlgoChoice choice;
    choice.known = true;
    choice.algorithm.assign(info.algorithm, strnlen(info.algorithm, sizeof(info.algorithm)));
    choice.ctas = info.ctas;
    choice.threads = info.threads;
    choice.chunk_bytes = info.chunkBytes;
    return choice;
  }

  // -R 2 is -R 1 for YALI: yaliCommRegister on the shared cudaMalloc buffers is its best.
  void RegisterBuffers(const std::vector<std::vector<void*>>& buffers, size_t bytes,
                       int /*mode*/) override {
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

  double AccumulationEpsilon(DType dtype) const override {
    // fp64 in fp64, every other floating type in fp32 (yali.h); integers are exact.
    if (dtype == DType::kDouble) return DTypeEpsilon(DType::kDouble);
    return IsFloating(dtype) ? DTypeEpsilon(DType::kFloat) : 0.0;
  }

  bool HasAsyncError(int local, std::string* message) override {
    yaliResult_t async = yaliSuccess;
    yaliResult_t result = yaliCommGetAsyncError(comms_[local], &async);
    if (result != yaliSuccess) async = result;
    if (async == yaliSuccess) return false;
    *message = ErrorText("yali communicator", async, comms_[local]);
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
        Fatal(ErrorText("yaliCommDestroy (local comm " + std::to_string(i) + ")", results[i],
                       nullptr));
    }
    comms_.clear();
  }

 private:
  static std::string ErrorText(const std::string& call, yaliResult_t result, yaliComm_t comm) {
    std::string detail = yaliGetLastError(comm);
    if (detail.empty() && comm != nullptr) detail = yaliGetLastError(nullptr);
    std::string text = call + " failed: result " + std::to_string(static_cast<int>(result)) +
                       " (" + yaliGetErrorString(result) + ")";
    if (!detail.empty()) text += ": " + detail;
    return text;
  }

  static void Check(yaliResult_t result, const std::string& call, yaliComm_t comm) {
    if (result != yaliSuccess) Fatal(ErrorText(call, result, comm));
  }

  // nccl-tests' sendrecv: yaliSend to send_peer and yaliRecv from recv_peer in one group (nested
  // in the harness's group across the local comms; yali.h: a group's point-to-point calls on a comm
  // run as one launch, every transfer progressing at once). A refused send has queued nothing: the
  // receive is not made and the case is a refusal (Outcome). A receive refused after its send was
  // queued cannot be undone (only the outermost group end could drop the send, and the harness's
  // group is outside this one; launched, the send would wait for a receive that never comes):
  // fatal.
  bool IssueSendRecv(int local, const LibraryCall& call, cudaStream_t stream,
                     std::string* refusal) {
    yaliComm_t comm = comms_[local];
    const yaliDataType_t type = ToYali(call.dtype);
    Check(yaliGroupStart(), "yaliGroupStart (sendrecv)", comm);
    yaliResult_t result = yaliSend(call.send, call.count, type, call.send_peer, comm, stream);
    if (result != yaliSuccess) {
      const std::string text = CallText("yaliSend", call, local);
      // Nothing of this call is queued: closing the group launches nothing of it.
      Check(yaliGroupEnd(), "yaliGroupEnd (sendrecv, after a refused yaliSend)", comm);
      return Outcome(result, text, comm, refusal);
    }
    result = yaliRecv(call.recv, call.count, type, call.recv_peer, comm, stream);
    if (result != yaliSuccess)
      Fatal(ErrorText(CallText("yaliRecv", call, local), result, comm) +
            " (after its yaliSend was queued in the group, which cannot be undone)");
    Check(yaliGroupEnd(), "yaliGroupEnd (" + CallText("sendrecv", call, local) + ")", comm);
    return true;
  }

  // yaliSend and yaliRecv have no dry run: each is made with count 0 instead, which checks the
  // type, the peer and that point-to-point is on (yali.h: YALI_P2P_CHANNELS=0 refuses every call,
  // yaliInvalidUsage) and moves nothing and matches nothing. Either refusal is the library saying
  // it would refuse the case; the buffers are checked by the first real call.
  bool PrecheckSendRecv(int local, const LibraryCall& call, std::string* refusal) {
    yaliComm_t comm = comms_[local];
    const yaliDataType_t type = ToYali(call.dtype);
    const char* function = "yaliSend";
    yaliResult_t result = yaliSend(call.send, 0, type, call.send_peer, comm, nullptr);
    if (result == yaliSuccess) {
      function = "yaliRecv";
      result = yaliRecv(call.recv, 0, type, call.recv_peer, comm, nullptr);
    }
    if (result == yaliSuccess) return true;
    const std::string text = std::string(function) + " with count 0 (precheck of " +
                             CallText("sendrecv", call, local) + ")";
    if (result == yaliInvalidArgument || result == yaliInvalidUsage) {
      *refusal = ErrorText(text, result, comm);
      return false;
    }
    Check(result, text, comm);
    return true;
  }

  // An issued call's result: true when enqueued; false, with *refusal, when refused (a refused call
  // has touched nothing, yali.h: the harness reports the case as skipped); fatal otherwise.
  static bool Outcome(yaliResult_t result, const std::string& call, yaliComm_t comm,
                      std::string* refusal) {
    if (result == yaliSuccess) return true;
    if (result == yaliInvalidArgument) {
      *refusal = ErrorText(call, result, comm);
      return false;
    }
    Check(result, call, comm);
    return true;
  }

  std::vector<yaliComm_t> comms_;
  std::vector<int> devices_;                 // per local comm
  std::vector<std::vector<void*>> handles_;  // per local comm, in registration order
};

}  // namespace

std::unique_ptr<Backend> MakeYaliBackend() { return std::unique_ptr<Backend>(new YaliBackend()); }

}  // namespace yali_perf
