// What goes where: the rules of libyali-nccl as pure functions (no NCCL library, no GPU), so that
// the host tests can walk every case. comm.cc and intercept.cc apply them.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <string>
#include <vector>

#include <nccl.h>

#include "yali/yali.h"

namespace yali::nccl_abi {

// ---- YALI_NCCL_DISABLE: collectives kept on NCCL -------------------------------------------------

// A set of collectives, bit c for yaliCollective_t c.
using CollectiveMask = uint32_t;
// The collectives an NCCL program can reach (AllReduce .. AlltoAll; AlltoAllv has no NCCL call).
constexpr CollectiveMask kAllNcclCollectives = (1u << (yaliCollAlltoAll + 1)) - 1;

// Parses "allgather,reducescatter" (YALI's collective names, vocabulary.h, in any case, with
// spaces allowed around the commas; "all" for every one; empty for none). Names it does not know
// are skipped and listed in *unknown (comma separated) for a warning.
CollectiveMask parseDisableList(const char* text, std::string* unknown);

// ---- Set-up: may this communicator have a YALI comm? --------------------------------------------

// What every rank tells the others when a communicator is made (allgathered over the real NCCL
// comm): its node and the settings that must agree for the ranks to route calls alike. Fixed size,
// plain bytes, the same layout on every rank.
struct RankRecord {
  static constexpr uint32_t kLayout = 1;  // changes whenever this struct does
  uint32_t layout;
  CollectiveMask disabled;  // this rank's YALI_NCCL_DISABLE
  uint32_t registerYali;    // this rank's YALI_NCCL_REGISTER (0 or 1)
  uint32_t reserved;
  char node[112];  // node identity (node_id.h), NUL-terminated, truncated to fit
};
static_assert(sizeof(RankRecord) == 128, "RankRecord is exchanged as 128 bytes");

// Whether YALI takes a communicator of nranks (2 to 8 GPUs); if not, *why says so. The same on
// every rank, so a comm it refuses skips the set-up's exchanges everywhere.
bool yaliTakes(int nranks, std::string* why);

RankRecord makeRecord(const std::string& node, CollectiveMask disabled, bool registerYali);

struct SetUpVerdict {
  bool yali = false;           // make a YALI comm
  bool registerYali = false;   // ncclCommRegister also registers with YALI
  CollectiveMask disabled = 0;  // the collectives that stay on NCCL (the same on every rank)
  std::string why;             // when !yali: why NCCL only (for the log)
};

// The same answer on every rank, since every rank decides from the same records.
SetUpVerdict decideSetUp(const std::vector<RankRecord>& records);

// ---- Each collective call -------------------------------------------------------------------------

enum class Route {
  kYali,
  kNoYaliComm,   // this communicator has none (the set-up's verdict, or YALI init failed)
  kDisabled,     // YALI_NCCL_DISABLE names the collective
  kCustomOp,     // not a built-in op (ncclRedOpCreatePreMulSum, or one YALI does not know)
  kUnknownType,  // a data type YALI does not have
  kOpForType,    // an op YALI does not take for this type (avg of integers)
};

struct CallShape {
  yaliCollective_t collective;
  ncclDataType_t type;
  ncclRedOp_t op;  // ignored by collectives that do not reduce
};

Route decideRoute(bool hasYali, CollectiveMask disabled, const CallShape& call);
const char* routeReason(Route route);  // "YALI_NCCL_DISABLE", ...

// ---- Results ---------------------------------------------------------------------------------------

// YALI's results 0..7 are NCCL's. yaliTimeout (a peer never arrived, reported on every survivor)
// becomes ncclRemoteError: NCCL's word for "a peer failed or left", which is what a timeout says
// about the peer; ncclSystemError would blame a local OS call. Programs built against NCCL < 2.30
// know no ncclTimeout, so it is not used even where the header has it.
ncclResult_t toNcclResult(yaliResult_t result);

// Power-of-2 size class of a message, for logging once per class: floor(log2(bytes)), 0 for 0.
int sizeClass(size_t bytes);

}  // namespace yali::nccl_abi
