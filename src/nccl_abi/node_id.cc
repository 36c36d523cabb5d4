#include "nccl_abi/node_id.h"

#include <ctype.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>

namespace yali::nccl_abi {

namespace {

std::string trimmed(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

}  // namespace

std::string nodeIdentity(const char* override, const std::string& bootId, const std::string& hostname) {
  if (override != nullptr && override[0] != '\0') return override;
  const std::string boot = trimmed(bootId), host = trimmed(hostname);
  if (boot.empty() && host.empty()) return "";
  return boot + "/" + host;
}

std::string thisNodeIdentity() {
  std::string boot;
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::getline(in, boot);
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  return nodeIdentity(getenv("YALI_NODE_ID"), boot, host);
}

}  // namespace yali::nccl_abi
