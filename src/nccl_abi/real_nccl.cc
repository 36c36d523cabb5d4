// Finding the real NCCL, and its functions, without ever finding ourselves.
//
// libyali-nccl is loaded first (LD_PRELOAD), so every nccl* name in the process resolves to it;
// the real library is opened with dlopen and each function taken from its handle with dlsym,
// which searches that library (and its dependencies), never the global scope. Where we look, in
// order (the first library that is an NCCL and is not us wins):
//   1. $YALI_NCCL_LIBRARY, when set: only it (a wrong path is an error, not a reason to guess);
//   2. dlopen("libnccl.so.2"): the one already loaded (the program's DT_NEEDED, or libtorch_cuda's,
//      matched by soname) or the one the loader would find (LD_LIBRARY_PATH, ld.so.cache);
//   3. next to a loaded libtorch_cuda.so: <site-packages>/nvidia/nccl/lib/libnccl.so.2, pip's NCCL,
//      which torch finds through its RPATH and the loader would not;
//   4. $NCCL_HOME/lib/libnccl.so.2 (and lib64).
// "Not us" is checked, not assumed: the candidate's ncclGetVersion must lie in another object than
// this library (dladdr), so that a YALI_NCCL_LIBRARY naming libyali-nccl, or a copy of it installed
// as libnccl.so.2, fails with a message instead of forwarding to itself forever.
#include <dlfcn.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <string>

#include "nccl_abi/diag.h"
#include "nccl_abi/env.h"
#include "nccl_abi/nccl_api.h"

namespace yali::nccl_abi {

namespace {

const char* const kApiNames[] = {
#define YALI_NCCL_FUNCTION(Ret, name, Params, Args) #name,
#include "nccl_api.inc"
#undef YALI_NCCL_FUNCTION
};
static_assert(sizeof(kApiNames) / sizeof(kApiNames[0]) == kApiCount, "one name per function");

struct RealLibrary {
  void* handle = nullptr;
  std::string path;   // where it was found
  std::string tried;  // when none was: every place and why it failed
  int version = 0;    // its ncclGetVersion
};

bool inThisLibrary(const void* address) {
  Dl_info there, here;
  if (dladdr(address, &there) == 0) return false;
  if (dladdr(reinterpret_cast<const void*>(&inThisLibrary), &here) == 0) return false;
  return there.dli_fbase == here.dli_fbase;
}

void* openCandidate(const std::string& path, std::string* tried) {
  auto refuse = [&](void* handle, const std::string& why) -> void* {
    *tried += (tried->empty() ? "" : "; ") + path + " (" + why + ")";
    if (handle != nullptr) dlclose(handle);
    return nullptr;
  };
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = dlerror();
    return refuse(nullptr, err != nullptr ? err : "dlopen failed");
  }
  void* probe = dlsym(handle, "ncclGetVersion");
  if (probe == nullptr) return refuse(handle, "no ncclGetVersion: not an NCCL");
  if (inThisLibrary(probe)) return refuse(handle, "that is libyali-nccl itself");
  return handle;
}

// <dir of the loaded libtorch_cuda.so>/../../nvidia/nccl/lib/libnccl.so.2, or "".
std::string besideTorch() {
  std::string found;
  dl_iterate_phdr(
      [](struct dl_phdr_info* info, size_t, void* out) -> int {
        const char* name = info->dlpi_name;
        const char* suffix = "/libtorch_cuda.so";
        const size_t n = name != nullptr ? strlen(name) : 0, m = strlen(suffix);
        if (n < m || strcmp(name + n - m, suffix) != 0) return 0;
        *static_cast<std::string*>(out) = std::string(name, n - m);  // .../site-packages/torch/lib
        return 1;
      },
      &found);
  return found.empty() ? "" : found + "/../../nvidia/nccl/lib/libnccl.so.2";
}

int versionOf(void* handle) {
  auto getVersion = reinterpret_cast<ncclResult_t (*)(int*)>(dlsym(handle, "ncclGetVersion"));
  int v = 0;
  if (getVersion == nullptr || getVersion(&v) != ncclSuccess) return 0;
  return v;
}

// NCCL_VERSION_CODE is X*1000+Y*100+Z up to 2.8 and X*10000+Y*100+Z from 2.9 on.
void splitVersion(int code, int* major, int* minor, int* patch) {
  const int base = code >= 10000 ? 10000 : 1000;
  *major = code / base;
  *minor = (code % base) / 100;
  *patch = code % 100;
}

RealLibrary openRealLibrary() {
  RealLibrary lib;
  const Settings& s = settings();
  auto take = [&](const std::string& path) {
    if (lib.handle == nullptr && !path.empty()) {
      lib.handle = openCandidate(path, &lib.tried);
      if (lib.handle != nullptr) lib.path = path;
    }
  };
  if (!s.library.empty()) {
    take(s.library);
  } else {
    take("libnccl.so.2");
    take(besideTorch());
    if (const char* home = getenv("NCCL_HOME")) {
      take(std::string(home) + "/lib/libnccl.so.2");
      take(std::string(home) + "/lib64/libnccl.so.2");
    }
  }
  if (lib.handle == nullptr) {
    warn(-1, "no NCCL library to forward to: tried %s. Set YALI_NCCL_LIBRARY=/path/to/libnccl.so.2",
         lib.tried.c_str());
    return lib;
  }
  lib.version = versionOf(lib.handle);
  int hMajor, hMinor, hPatch, rMajor, rMinor, rPatch;
  splitVersion(NCCL_VERSION_CODE, &hMajor, &hMinor, &hPatch);
  splitVersion(lib.version, &rMajor, &rMinor, &rPatch);
  info(-1, "forwarding to %s (NCCL %d.%d.%d; built with nccl.h %d.%d.%d)", lib.path.c_str(), rMajor, rMinor,
       rPatch, hMajor, hMinor, hPatch);
  if (rMajor * 100 + rMinor > hMajor * 100 + hMinor) {
    // The functions NCCL added since our header are not ours: the program's calls go straight to
    // NCCL, with our communicator handle where they take one.
    warn(-1,
         "%s is NCCL %d.%d.%d, newer than the nccl.h %d.%d.%d libyali-nccl was built with: a program "
         "that calls a function added since with a communicator would crash. Rebuild libyali-nccl "
         "against this NCCL's header (NCCL_HOME=<its directory>).",
         lib.path.c_str(), rMajor, rMinor, rPatch, hMajor, hMinor, hPatch);
  }
  return lib;
}

const RealLibrary& realLibrary() {
  static const RealLibrary lib = openRealLibrary();
  return lib;
}

// One slot per function: null until looked up, then its address or kMissing.
char missingMarker;
void* const kMissing = &missingMarker;
std::atomic<void*> slots[kApiCount];

}  // namespace

const char* apiName(Api f) {
  const int i = static_cast<int>(f);
  return i >= 0 && i < kApiCount ? kApiNames[i] : "?";
}

void* realAddress(Api f) {
  std::atomic<void*>& slot = slots[static_cast<int>(f)];
  void* p = slot.load(std::memory_order_acquire);
  if (p == nullptr) {
    const RealLibrary& lib = realLibrary();
    p = lib.handle != nullptr ? dlsym(lib.handle, apiName(f)) : nullptr;
    if (p != nullptr && inThisLibrary(p)) p = nullptr;  // never ourselves (see the top)
    if (p == nullptr && lib.handle != nullptr)
      warn(-1, "%s is not in %s (NCCL %d): calls return ncclInvalidUsage", apiName(f), lib.path.c_str(),
           lib.version);
    p = p != nullptr ? p : kMissing;
    slot.store(p, std::memory_order_release);  // racing threads store the same value
  }
  return p == kMissing ? nullptr : p;
}

template <>
ncclResult_t missingResult<ncclResult_t>(Api f) {
  const RealLibrary& lib = realLibrary();
  if (lib.handle == nullptr)
    return shimFail(ncclSystemError, "%s: no NCCL library found (tried %s)", apiName(f), lib.tried.c_str());
  return shimFail(ncclInvalidUsage, "%s is not in %s (NCCL %d)", apiName(f), lib.path.c_str(), lib.version);
}

template <>
const char* missingResult<const char*>(Api f) {
  missingResult<ncclResult_t>(f);
  return shimLastError();
}

template <>
void missingResult<void>(Api f) {
  missingResult<ncclResult_t>(f);
}

#ifdef YALI_NCCL_HAS_DEVICE_HEADER
template <>
int missingResult<int>(Api f) {
  missingResult<ncclResult_t>(f);
  return -1;
}

template <>
ncclTeam_t missingResult<ncclTeam_t>(Api f) {
  missingResult<ncclResult_t>(f);
  return ncclTeam_t{};
}
#endif

}  // namespace yali::nccl_abi
