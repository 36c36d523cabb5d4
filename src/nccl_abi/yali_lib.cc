#include "nccl_abi/yali_lib.h"

#include <dlfcn.h>
#include <stdlib.h>

#include <string>

#include "nccl_abi/diag.h"

namespace yali::nccl_abi {

namespace {

struct Loaded {
  YaliLib lib;
  YaliLib runtime;       // CUDA functions only (cudaRuntime)
  bool runtimeOk = false;
  bool ok = false;
  std::string error;
};

Loaded load() {
  Loaded l;
  const char* env = getenv("YALI_LIBRARY");
  const std::string path = env != nullptr && env[0] != '\0' ? env : YALI_LIBRARY_FILE_NAME;
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = dlerror();
    l.error = "cannot open " + path + ": " + (err != nullptr ? err : "dlopen failed");
  }
  // dlsym on libyali's handle searches libyali, then its dependencies: the CUDA functions are the
  // runtime libyali itself calls.
  std::string missing;
  auto find = [&](const char* name) -> void* {
    void* p = handle != nullptr ? dlsym(handle, name) : nullptr;
    if (handle != nullptr && p == nullptr) missing += std::string(missing.empty() ? "" : ", ") + name;
    return p;
  };
#define YALI_NCCL_FIND_YALI(name) l.lib.name = reinterpret_cast<decltype(l.lib.name)>(find(#name));
#define YALI_NCCL_FIND_CUDA(name, type) l.lib.name = reinterpret_cast<std::add_pointer_t<type>>(find(#name));
  YALI_NCCL_YALI_FUNCTIONS(YALI_NCCL_FIND_YALI)
  YALI_NCCL_CUDA_FUNCTIONS(YALI_NCCL_FIND_CUDA)
#undef YALI_NCCL_FIND_YALI
#undef YALI_NCCL_FIND_CUDA
  if (handle != nullptr && !missing.empty()) l.error = path + " lacks " + missing + " (an older libyali?)";
  l.ok = l.error.empty();
  // The CUDA functions alone, for a rank that must still answer its peers' set-up rounds.
  auto findAll = [&](void* h) {
    bool all = h != nullptr;
#define YALI_NCCL_FIND_RT(name, type)                                                         \
  l.runtime.name = h != nullptr ? reinterpret_cast<std::add_pointer_t<type>>(dlsym(h, #name)) : nullptr; \
  all = all && l.runtime.name != nullptr;
    YALI_NCCL_CUDA_FUNCTIONS(YALI_NCCL_FIND_RT)
#undef YALI_NCCL_FIND_RT
    return all;
  };
  l.runtimeOk = findAll(handle);
  if (!l.runtimeOk) {
    // $YALI_NCCL_CUDA_RUNTIME first (a path: the runtime to answer with; the host tests name their
    // fake's), then the program's libcudart of this build's major release, then any.
    const char* named = getenv("YALI_NCCL_CUDA_RUNTIME");
    const std::string major = "libcudart.so." + std::to_string(CUDART_VERSION / 1000);
    for (const char* name : {named != nullptr && named[0] != '\0' ? named : major.c_str(), major.c_str(), "libcudart.so"}) {
      void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);  // the program's, if loaded
      if (h == nullptr) h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if ((l.runtimeOk = findAll(h))) break;
    }
  }
  if (l.ok)
    info(-1, "YALI from %s", path.c_str());
  else
    warn(-1, "no YALI, every communicator is NCCL only: %s. Set YALI_LIBRARY=/path/to/libyali.so",
         l.error.c_str());
  return l;
}

const Loaded& loaded() {
  static const Loaded l = load();
  return l;
}

}  // namespace

const YaliLib* yaliLib() { return loaded().ok ? &loaded().lib : nullptr; }

const YaliLib* cudaRuntime() {
  if (loaded().ok) return &loaded().lib;
  return loaded().runtimeOk ? &loaded().runtime : nullptr;
}

const char* yaliLibError() { return loaded().error.c_str(); }

}  // namespace yali::nccl_abi
