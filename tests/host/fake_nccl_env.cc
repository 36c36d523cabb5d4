// A stand-in for an NCCL environment plugin (NCCL 2.28's ext-env, ncclEnvPlugin_v1) in
// libyali-nccl's host tests: fake_nccl.cc loads it as NCCL does (NCCL_ENV_PLUGIN) and reads its
// settings through it. It answers NCCL_COMM_BLOCKING with $YALI_FAKE_ENV_PLUGIN_COMM_BLOCKING
// (unset: unset), not with the process's NCCL_COMM_BLOCKING, as a plugin answering otherwise than
// getenv may; every other name as getenv.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <nccl.h>

namespace {

ncclResult_t init(uint8_t, uint8_t, uint8_t, const char*) { return ncclSuccess; }
ncclResult_t finalize() { return ncclSuccess; }
const char* getEnv(const char* name) {
  if (strcmp(name, "NCCL_COMM_BLOCKING") == 0) return getenv("YALI_FAKE_ENV_PLUGIN_COMM_BLOCKING");
  return getenv(name);
}

}  // namespace

// NCCL's ncclEnv_v1_t (plugin/env/env_v1.h): name, init, finalize, getEnv.
struct FakeEnvV1 {
  const char* name;
  ncclResult_t (*init)(uint8_t, uint8_t, uint8_t, const char*);
  ncclResult_t (*finalize)();
  const char* (*getEnv)(const char*);
};

extern "C" __attribute__((visibility("default"))) FakeEnvV1 ncclEnvPlugin_v1;
FakeEnvV1 ncclEnvPlugin_v1 = {"yaliFakeEnv", init, finalize, getEnv};
