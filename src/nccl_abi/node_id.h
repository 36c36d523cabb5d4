// Which machine a rank runs on, as libyali-nccl decides whether a communicator lies within one node
// (YALI's reach: the GPUs of one machine, one kernel, one user).
#pragma once

#include <string>

namespace yali::nccl_abi {

// The rule, pure so that it can be tested:
//  - YALI_NODE_ID, when set and not empty, is the identity as given (for machines where the rule
//    below is wrong: containers sharing a kernel and a hostname but not a network namespace, say);
//  - else "<boot id>/<hostname>": the kernel's boot id (/proc/sys/kernel/random/boot_id) tells two
//    machines apart even when their hostnames are equal, and the hostname tells apart containers
//    with their own UTS namespace, which share the host's boot id but cannot reach each other's
//    abstract sockets when their network namespaces differ;
//  - empty when neither is known: such a rank is never taken to share a node.
// NCCL_HOSTID plays no part: tests set it per rank to let NCCL put two ranks on one GPU, while
// YALI, where YALI_ALLOW_SHARED_GPU=1 allows it, runs them as one node.
std::string nodeIdentity(const char* override, const std::string& bootId, const std::string& hostname);

// nodeIdentity() of this process: YALI_NODE_ID, the boot id and gethostname().
std::string thisNodeIdentity();

}  // namespace yali::nccl_abi
