// NCCL through the Backend interface: the baseline. Built only when CMake found NCCL
// (YALI_PERF_HAVE_NCCL); libyali itself never needs NCCL.
#include "backend.h"

#ifdef YALI_PERF_HAVE_NCCL

#include <nccl.h>

#include <cstring>

#include "coll_shape.h"
#include "cuda_check.h"
#include "perf_error.h"

namespace yali_perf {
namespace {

// NCCL's fp8 types came in 2.24 and its Gather, Scatter and AlltoAll in 2.28: against an older
// nccl.h, those cases are refused here (skipped rows) instead of failing to build.
#define YALI_PERF_NCCL_HAS_FP8 (NCCL_VERSION_CODE >= 22400)
#define YALI_PERF_NCCL_HAS_ROOTED_A2A (NCCL_VERSION_CODE >= 22800)
// ncclConfig_t.CTAPolicy and symmetric windows (ncclCommWindowRegister) came in 2.27, ncclMemAlloc
// in 2.19.
#define YALI_PERF_NCCL_HAS_WINDOWS (NCCL_VERSION_CODE >= 22700)

bool ToNccl(DType dtype, ncclDataType_t* type) {
  switch (dtype) {
    case DType::kFloat: *type = ncclFloat32; return true;
    case DType::kHalf: *type = ncclFloat16; return true;
    case DType::kBfloat16: *type = ncclBfloat16; return true;
    case DType::kInt8: *type = ncclInt8; return true;
    case DType::kUint8: *type = ncclUint8; return true;
    case DType::kInt32: *type = ncclInt32; return true;
    case DType::kUint32: *type = ncclUint32; return true;
    case DType::kInt64: *type = ncclInt64; return true;
    case DType::kUint64: *type = ncclUint64; return true;
    case DType::kDouble: *type = ncclFloat64; return true;
#if YALI_PERF_NCCL_HAS_FP8
    case DType::kF8e4m3: *type = ncclFloat8e4m3; return true;
    case DType::kF8e5m2: *type = ncclFloat8e5m2; return true;
#else
    case DType::kF8e4m3:
    case DType::kF8e5m2: return false;
#endif
  }
  return false;
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

// Why this build cannot do something: "this yali-perf was built against NCCL 21903, which has no
// ncclMemAlloc (NCCL 2.19 or later)".
std::string BuiltWithout(const std::string& what, const char* since) {
  return "this yali-perf was built against NCCL " + std::to_string(NCCL_VERSION_CODE) + ", which has no " + what +
         " (NCCL " + since + " or later)";
}

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

class NcclBackend final : public Backend {
 public:
  explicit NcclBackend(const NcclOptions& options) : options_(options) {}

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
    if (options_.cta_policy < 0) {
      Check(ncclCommInitAll(comms_.data(), static_cast<int>(devices.size()), devices.data()),
            "ncclCommInitAll", nullptr);
      return;
    }
    // ncclCommInitAll takes no config: one ncclCommInitRankConfig per GPU inside a group, as
    // ncclCommInitAll does itself.
    ncclUniqueId id;
    Check(ncclGetUniqueId(&id), "ncclGetUniqueId", nullptr);
    ncclConfig_t config = Config();
    Check(ncclGroupStart(), "ncclGroupStart", nullptr);
    for (size_t i = 0; i < devices.size(); ++i) {
      YALI_PERF_CUDA(cudaSetDevice(devices[i]));
      Check(InitRankConfig(&comms_[i], static_cast<int>(devices.size()), id, static_cast<int>(i),
                           &config),
            "ncclCommInitRankConfig(rank " + std::to_string(i) + ", " + PolicyText() + ")",
            nullptr);
    }
    Check(ncclGroupEnd(), "ncclGroupEnd (ncclCommInitRankConfig, " + PolicyText() + ")", nullptr);
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
    if (options_.cta_policy < 0) {
      Check(ncclCommInitRank(&comms_[0], nranks, id, rank), "ncclCommInitRank", nullptr);
      return;
    }
    ncclConfig_t config = Config();
    Check(InitRankConfig(&comms_[0], nranks, id, rank, &config),
          "ncclCommInitRankConfig(" + PolicyText() + ")", nullptr);
  }

  void GroupStart() override {
    Check(ncclGroupStart(), "ncclGroupStart", nullptr);
    if (group_depth_++ == 0) refused_in_group_ = false;
  }

  void GroupEnd() override {
    ncclResult_t result = ncclGroupEnd();
    --group_depth_;
    // A call refused inside a group makes ncclGroupEnd return the refusal too, and NCCL then
    // launches none of the group's calls: already reported by Issue, not a failure here.
    if (result == ncclInvalidArgument && refused_in_group_) return;
    Check(result, "ncclGroupEnd", nullptr);
  }

  bool Issue(int local, const LibraryCall& call, cudaStream_t stream,
             std::string* refusal) override {
    ncclComm_t comm = comms_[local];
    const char* function = "?";
    if (!Supported(call, refusal)) {
      refused_in_group_ = true;
      return false;
    }
    ncclDataType_t type = ncclFloat32;
    ToNccl(call.dtype, &type);
    const ncclRedOp_t op = ToNccl(call.op);
    ncclResult_t result = ncclInternalError;
    switch (call.kind) {
      case CollId::kAllReduce:
        function = "ncclAllReduce";
        result = ncclAllReduce(call.send, call.recv, call.count, type, op, comm, stream);
        break;
      case CollId::kReduceScatter:
        function = "ncclReduceScatter";
        result = ncclReduceScatter(call.send, call.recv, call.count, type, op, comm, stream);
        break;
      case CollId::kAllGather:
        function = "ncclAllGather";
        result = ncclAllGather(call.send, call.recv, call.count, type, comm, stream);
        break;
      case CollId::kBroadcast:
        function = "ncclBroadcast";
        result = ncclBroadcast(call.send, call.recv, call.count, type, call.root, comm, stream);
        break;
      case CollId::kReduce:
        function = "ncclReduce";
        result = ncclReduce(call.send, call.recv, call.count, type, op, call.root, comm, stream);
        break;
#if YALI_PERF_NCCL_HAS_ROOTED_A2A
      case CollId::kGather:
        function = "ncclGather";
        result = ncclGather(call.send, call.recv, call.count, type, call.root, comm, stream);
        break;
      case CollId::kScatter:
        function = "ncclScatter";
        result = ncclScatter(call.send, call.recv, call.count, type, call.root, comm, stream);
        break;
      case CollId::kAlltoAll:
        function = "ncclAlltoAll";
        result = ncclAlltoAll(call.send, call.recv, call.count, type, comm, stream);
        break;
#else
      case CollId::kGather:
      case CollId::kScatter:
      case CollId::kAlltoAll: break;  // refused by Supported
#endif
      case CollId::kSendRecv:
        result = IssueSendRecv(local, call, type, stream, &function);
        break;
      case CollId::kRsAg:
        Fatal("internal: rs_ag is not one library call");
      case CollId::kAlltoAllv:
        Fatal("internal: alltoallv is issued through IssueVar");
    }
    if (result == ncclSuccess) return true;
    if (result == ncclInvalidArgument) {
      refused_in_group_ = true;
      *refusal = ErrorText(CallText(function, call, local), result, comm);
      return false;
    }
    Check(result, CallText(function, call, local), comm);
    return true;
  }

  // NCCL's AlltoAllv is point-to-point: the host-count form as torch's all_to_all_single issues
  // it (torch/csrc/cuda/nccl.cpp, all2all_single_unequal_split): one group with an ncclSend and an
  // ncclRecv per peer, the peers with a zero count left out, displacements packed. The other forms
  // have no NCCL counterpart.
  bool IssueVar(int local, const VarCall& call, cudaStream_t stream,
                std::string* refusal) override {
    ncclDataType_t type = ncclFloat32;
    if (call.form != VarForm::kHostCounts || !ToNccl(call.dtype, &type)) {
      *refusal = call.form != VarForm::kHostCounts
                     ? std::string("NCCL has no AlltoAllv form ") + VarFormName(call.form)
                     : BuiltWithout(DTypeName(call.dtype), "2.24");
      refused_in_group_ = true;
      return false;
    }
    ncclComm_t comm = comms_[local];
    const size_t element_bytes = ElementSize(call.dtype);
    const char* send = static_cast<const char*>(call.send);
    char* recv = static_cast<char*>(call.recv);
    size_t send_offset = 0;
    size_t recv_offset = 0;
    const std::string what = "ncclSend/ncclRecv (" + std::string(DTypeName(call.dtype)) +
                             ", local comm " + std::to_string(local) + ")";
    Check(ncclGroupStart(), "ncclGroupStart", comm);
    for (int peer = 0; peer < call.nranks; ++peer) {
      if (call.send_counts[peer] != 0)
        Check(ncclSend(send + send_offset * element_bytes, call.send_counts[peer], type, peer, comm,
                       stream),
              what, comm);
      if (call.recv_counts[peer] != 0)
        Check(ncclRecv(recv + recv_offset * element_bytes, call.recv_counts[peer], type, peer, comm,
                       stream),
              what, comm);
      send_offset += call.send_counts[peer];
      recv_offset += call.recv_counts[peer];
    }
    Check(ncclGroupEnd(), "ncclGroupEnd", comm);
    return true;
  }

  // nccl-tests' sendrecv (src/sendrecv.cu, SendRecvRunColl): ncclSend to send_peer and ncclRecv
  // from recv_peer in one group, nested in the harness's group across the local comms. *function
  // names the call that failed. A refused ncclSend or ncclRecv makes NCCL launch none of the
  // group's calls (the outermost ncclGroupEnd returns the refusal: GroupEnd expects it), so either
  // refusal leaves nothing waiting; any other failure is fatal.
  ncclResult_t IssueSendRecv(int local, const LibraryCall& call, ncclDataType_t type,
                             cudaStream_t stream, const char** function) {
    ncclComm_t comm = comms_[local];
    GroupStart();
    *function = "ncclSend";
    ncclResult_t result = ncclSend(call.send, call.count, type, call.send_peer, comm, stream);
    if (result == ncclSuccess) {
      *function = "ncclRecv";
      result = ncclRecv(call.recv, call.count, type, call.recv_peer, comm, stream);
    }
    if (result == ncclInvalidArgument) refused_in_group_ = true;
    else Check(result, CallText(*function, call, local), comm);
    GroupEnd();
    return result;
  }

  // NCCL has no dry run; what this build of yali-perf cannot call is refused here.
  bool Precheck(int local, const LibraryCall& call, std::string* refusal) override {
    return Supported(call, refusal);
  }

  // Every -R mode runs NCCL on memory from ncclMemAlloc (cuMem), as nccl-tests allocates its
  // buffers (2.19.6, common.cu AllocateBuffs): NCCL's IPC registration takes cuMem memory only
  // (cudaMalloc's only with NCCL_LEGACY_CUDA_REGISTER=1, off by default), both its registration
  // of captured buffers in CUDA graphs (NCCL_GRAPH_REGISTER, on by default: -R 0 with -G) and
  // ncclCommRegister (-R 1); symmetric windows (-R 2) need it too. On the shared cudaMalloc
  // buffers NCCL's send/recv in graphs copied through its FIFOs (8 MB: 47.6 us against 36.8 in
  // nccl-tests, and the same with NCCL_GRAPH_REGISTER=0; Session 43).
  // --nccl-memory shared keeps NCCL on the shared buffers (but for -R 2, which it refuses).
  bool WantsOwnBuffers(int mode) const override {
#if NCCL_VERSION_CODE >= 21900
    return options_.own_memory || mode == 2;
#else
    return mode == 2;  // refused in AllocateOwnBuffer: no ncclMemAlloc
#endif
  }

  void* AllocateOwnBuffer(int local, size_t bytes) override {
    YALI_PERF_CUDA(cudaSetDevice(devices_[local]));
    void* buffer = nullptr;
#if NCCL_VERSION_CODE >= 21900
    Check(ncclMemAlloc(&buffer, bytes),
          "ncclMemAlloc(" + std::to_string(bytes) + " bytes, local comm " +
              std::to_string(local) + ")",
          comms_[local]);
#else
    Fatal("-R 2: " + BuiltWithout("ncclMemAlloc", "2.19"));
#endif
    return buffer;
  }

  void FreeOwnBuffer(int local, void* buffer) override {
#if NCCL_VERSION_CODE >= 21900
    YALI_PERF_CUDA(cudaSetDevice(devices_[local]));
    Check(ncclMemFree(buffer), "ncclMemFree(local comm " + std::to_string(local) + ")", nullptr);
#endif
  }

  // -R 1: ncclCommRegister (NCCL >= 2.19) is local, not collective; NCCL uses a registration
  // only when every rank passes registered buffers, which -R 1 guarantees by registering the
  // same buffers on every rank. -R 2: ncclCommWindowRegister is collective, so one process's
  // comms register inside one group (as nccl-tests does); every rank registers the same number of
  // buffers of the same size in the same order, and every call's offset into a window is the
  // same on every rank (the harness's layout), as NCCL_WIN_COLL_SYMMETRIC requires.
  void RegisterBuffers(const std::vector<std::vector<void*>>& buffers, size_t bytes,
                       int mode) override {
    if (mode == 2) {
      RegisterWindows(buffers, bytes);
      return;
    }
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
    Fatal("-R 1: " + BuiltWithout("ncclCommRegister", "2.19") + "; run -R 0 or --impl yali");
#endif
  }

  void DeregisterBuffers() override {
#if YALI_PERF_NCCL_HAS_WINDOWS
    // As nccl-tests does: one comm after another, outside a group (deregistration is local to
    // the rank). NCCL's order: every window is deregistered, with the handle NCCL filled in at
    // RegisterWindows' ncclGroupEnd, before ncclMemFree of its memory and before ncclCommDestroy
    // (EndRun: DeregisterBuffers, then DestroyAll, then FreeOwnBuffer).
    for (size_t local = 0; local < windows_.size(); ++local) {
      YALI_PERF_CUDA(cudaSetDevice(devices_[local]));
      for (size_t k = 0; k < windows_[local].size(); ++k)
        Check(ncclCommWindowDeregister(comms_[local], windows_[local][k]),
              "ncclCommWindowDeregister(buffer " + std::to_string(k) + ", local comm " +
                  std::to_string(local) + ")",
              comms_[local]);
    }
    windows_.clear();
#endif
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

 private:
  static bool Supported(const LibraryCall& call, std::string* refusal) {
    ncclDataType_t type;
    if (!ToNccl(call.dtype, &type)) {
      *refusal = BuiltWithout(DTypeName(call.dtype), "2.24");
      return false;
    }
#if !YALI_PERF_NCCL_HAS_ROOTED_A2A
    if (call.kind == CollId::kGather || call.kind == CollId::kScatter ||
        call.kind == CollId::kAlltoAll) {
      *refusal = BuiltWithout(CollName(call.kind), "2.28");
      return false;
    }
#endif
    return true;
  }

 public:

  bool HasAsyncError(int local, std::string* message) override {
    ncclResult_t async = ncclSuccess;
    ncclResult_t result = ncclCommGetAsyncError(comms_[local], &async);
    if (result != ncclSuccess) async = result;
    if (async == ncclSuccess || async == ncclInProgress) return false;
    *message = ErrorText("nccl communicator", async, comms_[local]);
    return true;
  }

  void AbortAll() override {
    for (ncclComm_t& comm : comms_) {
      if (comm != nullptr) ncclCommAbort(comm);
      comm = nullptr;
    }
    comms_.clear();
    handles_.clear();  // the abort released the registrations with the comms
#if YALI_PERF_NCCL_HAS_WINDOWS
    windows_.clear();
#endif
  }

  void DestroyAll() override {
    // Comms from ncclCommInitAll may be destroyed one after another from one thread.
    for (size_t i = 0; i < comms_.size(); ++i) {
      ncclResult_t result = ncclCommDestroy(comms_[i]);
      comms_[i] = nullptr;
      if (result != ncclSuccess)
        Fatal(ErrorText("ncclCommDestroy (local comm " + std::to_string(i) + ")", result, nullptr));
    }
    comms_.clear();
  }

 private:
  static std::string ErrorText(const std::string& call, ncclResult_t result, ncclComm_t comm) {
    std::string text = call + " failed: result " + std::to_string(static_cast<int>(result)) +
                       " (" + ncclGetErrorString(result) + ")";
#if NCCL_VERSION_CODE >= 21300
    const char* detail = ncclGetLastError(comm);
    if (detail != nullptr && *detail != '\0') text += ": " + std::string(detail);
#endif
    return text;
  }

  static void Check(ncclResult_t result, const std::string& call, ncclComm_t comm) {
    if (result != ncclSuccess) Fatal(ErrorText(call, result, comm));
  }

  std::string PolicyText() const {
    const char* names[] = {"NCCL_CTA_POLICY_DEFAULT", "NCCL_CTA_POLICY_EFFICIENCY",
                           "NCCL_CTA_POLICY_ZERO"};
    return options_.cta_policy >= 0 && options_.cta_policy < 3
               ? std::string("CTAPolicy ") + names[options_.cta_policy]
               : "CTAPolicy " + std::to_string(options_.cta_policy);
  }

  // The config of -x: only CTAPolicy set, everything else NCCL's default.
  ncclConfig_t Config() const {
#if YALI_PERF_NCCL_HAS_WINDOWS
    // The library loaded may be older than the header: NCCL reads the fields of its own version
    // and would ignore the policy silently.
    if (VersionCode() < 22700 || (options_.cta_policy == 2 && VersionCode() < 22800))
      Fatal("-x " + std::to_string(options_.cta_policy) + ": the NCCL loaded is " +
            VersionText() + ", which has no " + PolicyText() + " (NCCL " +
            (options_.cta_policy == 2 ? "2.28" : "2.27") + " or later)");
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.CTAPolicy = options_.cta_policy;
    return config;
#else
    Fatal("-x: this yali-perf was built against NCCL " + std::to_string(NCCL_VERSION_CODE) +
          ", whose ncclConfig_t has no CTAPolicy (NCCL 2.27 or later)");
#endif
  }

  static ncclResult_t InitRankConfig(ncclComm_t* comm, int nranks, const ncclUniqueId& id,
                                     int rank, ncclConfig_t* config) {
#if YALI_PERF_NCCL_HAS_WINDOWS
    return ncclCommInitRankConfig(comm, nranks, id, rank, config);
#else
    return ncclInvalidUsage;
#endif
  }

  void RegisterWindows(const std::vector<std::vector<void*>>& buffers, size_t bytes) {
#if YALI_PERF_NCCL_HAS_WINDOWS
    if (VersionCode() < 22700)
      Fatal("-R 2: the NCCL loaded is " + VersionText() +
            ", which has no symmetric windows (ncclCommWindowRegister, NCCL 2.27 or later)");
    // Inside a group NCCL writes each window handle through the pointer it was given only at
    // ncclGroupEnd (ncclCommWindowRegister's documentation; NCCL queues the pointer with the
    // task). So the handles' final places, windows_[local][k], are made before the first call and
    // not moved until the group has ended: a local variable copied into windows_ right after the
    // call would copy null, NCCL would later write into the dead variable, and
    // DeregisterBuffers would pass null handles, which ncclCommWindowDeregister ignores. The
    // windows would then stay registered into ncclCommDestroy and ncclMemFree, which NCCL
    // forbids (2.28.3's ncclCommDestroy then deregisters the IPC registrations under the windows
    // through proxy state it has already freed).
    windows_.assign(comms_.size(), std::vector<ncclWindow_t>());
    for (size_t local = 0; local < comms_.size(); ++local)
      windows_[local].assign(buffers[local].size(), nullptr);
    Check(ncclGroupStart(), "ncclGroupStart", nullptr);
    for (size_t local = 0; local < comms_.size(); ++local) {
      YALI_PERF_CUDA(cudaSetDevice(devices_[local]));
      for (size_t k = 0; k < buffers[local].size(); ++k) {
        Check(ncclCommWindowRegister(comms_[local], buffers[local][k], bytes, &windows_[local][k],
                                     NCCL_WIN_COLL_SYMMETRIC),
              "ncclCommWindowRegister(buffer " + std::to_string(k) + ", " +
                  std::to_string(bytes) + " bytes, local comm " + std::to_string(local) +
                  ", NCCL_WIN_COLL_SYMMETRIC)",
              comms_[local]);
      }
    }
    Check(ncclGroupEnd(), "ncclGroupEnd (ncclCommWindowRegister)", nullptr);
    // From here on windows_ holds NCCL's handles (null only where NCCL registered nothing: a comm
    // without symmetric support and NCCL_LOCAL_REGISTER=0).
#else
    Fatal("-R 2: this yali-perf was built against NCCL " + std::to_string(NCCL_VERSION_CODE) +
          ", which has no symmetric windows (ncclCommWindowRegister, NCCL 2.27 or later)");
#endif
  }

  NcclOptions options_;
  std::vector<ncclComm_t> comms_;
  int group_depth_ = 0;
  bool refused_in_group_ = false;            // some call of the open group was refused
  std::vector<int> devices_;                 // per local comm
  std::vector<std::vector<void*>> handles_;  // per local comm, in registration order (-R 1)
#if YALI_PERF_NCCL_HAS_WINDOWS
  std::vector<std::vector<ncclWindow_t>> windows_;  // likewise (-R 2)
#endif
};

}  // namespace

std::unique_ptr<Backend> MakeNcclBackend(const NcclOptions& options, std::string* reason) {
  return std::unique_ptr<Backend>(new NcclBackend(options));
}

}  // namespace yali_perf

#else  // !YALI_PERF_HAVE_NCCL

#ifndef YALI_PERF_NCCL_MISSING_REASON
#define YALI_PERF_NCCL_MISSING_REASON "nccl.h and libnccl were not found when yali-perf was configured"
#endif

namespace yali_perf {

std::unique_ptr<Backend> MakeNcclBackend(const NcclOptions& /*options*/, std::string* reason) {
  *reason = YALI_PERF_NCCL_MISSING_REASON;
  return nullptr;
}

}  // namespace yali_perf

#endif  // YALI_PERF_HAVE_NCCL
