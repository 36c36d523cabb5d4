// Host tests of libyali-nccl (src/nccl_abi): no GPU, no NCCL library.
//
//  - Its exports are exactly the functions the nccl.h of the build declares: the names read off the
//    library's ELF dynamic symbol table equal those read off the header's text (a scan independent
//    of the generator), and the generated table's. The types: this file redeclares every table row
//    with nccl.h included, so a row whose parameters differ from the header's declaration fails to
//    compile here (the library's own files define each function the same way, with the same check).
//  - Its behaviour with a stand-in NCCL (fake_nccl.cc, through YALI_NCCL_LIBRARY): forwards reach
//    it with the communicators unwrapped, NCCL's own handles pass untouched, registrations keep
//    NCCL's handle, groups reach it, a function it lacks is an error, and a YALI_NCCL_LIBRARY naming
//    libyali-nccl itself is refused instead of recursing.
//  - Its rules (routing.h, node_id.h): the YALI_NCCL_DISABLE parser, node identity, whether NCCL
//    makes a comm blocking, the set-up's verdict, the routing of each call, result mapping; across
//    nodes: the layout, the splits' colors and keys, the path per call, the AllReduce shard and
//    tail, the scratch layout's copies, and a host simulation of the hierarchical AllGather and
//    ReduceScatter steps against the flat results.
#include <dirent.h>
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nccl.h>
#ifdef YALI_NCCL_HAS_DEVICE_HEADER
#include <nccl_device.h>
#endif

#include "harness.h"
#include "nccl_abi/node_id.h"
#include "nccl_abi/routing.h"

using namespace yali::nccl_abi;

// ---- The generated table, redeclared: each row must be the header's declaration ------------------

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#define YALI_NCCL_FUNCTION(Ret, name, Params, Args) extern "C" Ret name Params;
#define YALI_NCCL_PROFILING_ALIAS(Ret, name, Params, Args) extern "C" Ret p##name Params;
#include "nccl_api.inc"
#undef YALI_NCCL_FUNCTION
#undef YALI_NCCL_PROFILING_ALIAS
#pragma GCC diagnostic pop

namespace {

const std::vector<std::string>& tableNames() {
  static const std::vector<std::string> names = {
#define YALI_NCCL_FUNCTION(Ret, name, Params, Args) #name,
#include "nccl_api.inc"
#undef YALI_NCCL_FUNCTION
#define YALI_NCCL_PROFILING_ALIAS(Ret, name, Params, Args) "p" #name,
#include "nccl_api.inc"
#undef YALI_NCCL_PROFILING_ALIAS
#define YALI_NCCL_DEVICE_PROFILING_ALIAS(Ret, name, Params, Args) "p" #name,
#include "nccl_api.inc"
#undef YALI_NCCL_DEVICE_PROFILING_ALIAS
  };
  return names;
}

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string joined(const std::set<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : " ") + n;
  return out.empty() ? "(none)" : out;
}

// a \ b, for messages.
std::set<std::string> minus(const std::set<std::string>& a, const std::set<std::string>& b) {
  std::set<std::string> out;
  for (const std::string& x : a)
    if (b.count(x) == 0) out.insert(x);
  return out;
}

bool isNcclName(const std::string& name) { return name.rfind("nccl", 0) == 0 || name.rfind("pnccl", 0) == 0; }

// The defined, visible functions named nccl* or pnccl* in an ELF64 shared library's .dynsym.
std::set<std::string> exportedFunctions(const std::string& path, std::string* error) {
  std::set<std::string> names;
  const std::string data = readFile(path);
  if (data.size() < sizeof(Elf64_Ehdr) || memcmp(data.data(), ELFMAG, SELFMAG) != 0 ||
      data[EI_CLASS] != ELFCLASS64) {
    *error = path + " is not an ELF64 file";
    return names;
  }
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(data.data());
  const auto* sections = reinterpret_cast<const Elf64_Shdr*>(data.data() + eh->e_shoff);
  for (int i = 0; i < eh->e_shnum; ++i) {
    if (sections[i].sh_type != SHT_DYNSYM) continue;
    const Elf64_Shdr& strtab = sections[sections[i].sh_link];
    const auto* syms = reinterpret_cast<const Elf64_Sym*>(data.data() + sections[i].sh_offset);
    const size_t n = sections[i].sh_size / sizeof(Elf64_Sym);
    for (size_t k = 0; k < n; ++k) {
      const Elf64_Sym& s = syms[k];
      const int bind = ELF64_ST_BIND(s.st_info), type = ELF64_ST_TYPE(s.st_info);
      if (s.st_shndx == SHN_UNDEF || type != STT_FUNC || (bind != STB_GLOBAL && bind != STB_WEAK) ||
          ELF64_ST_VISIBILITY(s.st_other) != STV_DEFAULT)
        continue;
      const std::string name = data.data() + strtab.sh_offset + s.st_name;
      if (isNcclName(name)) names.insert(name);
    }
  }
  if (names.empty()) *error = "no nccl* function in " + path + "'s dynamic symbols";
  return names;
}

// The functions a header declares, read off its text: comments, string literals and preprocessor
// lines removed, then every nccl*/pnccl* name followed by "(". In nccl.h that is exactly the
// function declarations (it has no inline bodies; macros are preprocessor lines). Every #if branch
// counts: the build defines NCCL_OS_LINUX, the one condition nccl.h puts declarations under.
std::set<std::string> declaredFunctions(const std::string& path) {
  const std::string text = readFile(path);
  std::string code;
  bool lineStart = true;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text.compare(i, 2, "/*") == 0) {
      const size_t end = text.find("*/", i + 2);
      i = end == std::string::npos ? text.size() : end + 1;
      code += ' ';
      continue;
    }
    if (text.compare(i, 2, "//") == 0) {
      while (i < text.size() && text[i] != '\n') ++i;
      code += '\n';
      lineStart = true;
      continue;
    }
    if (text[i] == '"') {
      for (++i; i < text.size() && text[i] != '"'; ++i)
        if (text[i] == '\\') ++i;
      code += "\"\"";
      continue;
    }
    if (lineStart && text[i] == '#') {  // a directive, with its continuation lines
      while (i < text.size() && !(text[i] == '\n' && text[i - 1] != '\\')) ++i;
      code += '\n';
      continue;
    }
    if (text[i] == '\n') lineStart = true;
    else if (text[i] != ' ' && text[i] != '\t') lineStart = false;
    code += text[i];
  }
  std::set<std::string> names;
  const std::regex declared(R"(\b(p?nccl[A-Za-z0-9_]*)\s*\()");
  for (std::sregex_iterator it(code.begin(), code.end(), declared), end; it != end; ++it) names.insert((*it)[1]);
  return names;
}

// The host functions of NCCL's device API (the headers in `dir`, nccl_device/), read off their
// text, each with its pncclX alias (libnccl exports both; the header declares only the first):
// NCCL declares each one exported as "NCCL_EXTERN_C __host__ <type> <name>(" (its device and inline
// functions are marked otherwise). A header that stops the build with #error (2.30's
// gin_win_stub.h, for Windows) is not part of this platform's API.
std::set<std::string> declaredHostFunctions(const std::string& dir) {
  std::set<std::string> names;
  if (dir.empty()) return names;
  const std::regex host(R"(NCCL_EXTERN_C\s+__host__\s+[A-Za-z_][A-Za-z0-9_]*\s*\**\s*(nccl[A-Za-z0-9_]*)\s*\()");
  std::function<void(const std::string&)> scan = [&](const std::string& d) {
    DIR* h = opendir(d.c_str());
    if (h == nullptr) return;
    while (const dirent* e = readdir(h)) {
      const std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      const std::string path = d + "/" + name;
      if (name.size() > 2 && name.compare(name.size() - 2, 2, ".h") == 0) {
        const std::string text = readFile(path);
        if (text.find("#error") != std::string::npos) continue;
        for (std::sregex_iterator it(text.begin(), text.end(), host), end; it != end; ++it) {
          names.insert((*it)[1]);
          names.insert("p" + (*it)[1].str());
        }
      } else {
        scan(path);  // a directory (impl/, gin/); anything else opens as nothing
      }
    }
    closedir(h);
  };
  scan(dir);
  return names;
}

}  // namespace

// ---- The exports ------------------------------------------------------------------------------------

TEST(exports_equal_the_headers_functions) {
  std::string error;
  const std::set<std::string> exported = exportedFunctions(YALI_NCCL_SHIM_PATH, &error);
  if (!error.empty()) std::printf("    %s\n", error.c_str());
  REQUIRE(error.empty());
  std::set<std::string> declared = declaredFunctions(YALI_NCCL_HEADER_PATH);
  CHECK(declared.size() > 40);  // nccl.h 2.19 declares 2 x 32; a scan that found nothing is broken
  const std::set<std::string> device = declaredHostFunctions(YALI_NCCL_DEVICE_DIR);
  CHECK_MSG(std::string(YALI_NCCL_DEVICE_DIR).empty() || device.count("ncclDevCommCreate") == 1,
            "%s: no ncclDevCommCreate found", YALI_NCCL_DEVICE_DIR);
  declared.insert(device.begin(), device.end());
  CHECK_MSG(exported == declared, "%s: exported, not declared: %s; declared, not exported: %s", YALI_NCCL_HEADER_PATH,
            joined(minus(exported, declared)).c_str(), joined(minus(declared, exported)).c_str());
  const std::set<std::string> table(tableNames().begin(), tableNames().end());
  CHECK_MSG(table.size() == tableNames().size(), "a name appears twice in nccl_api.inc");
  CHECK_MSG(exported == table, "exported, not in the table: %s; in the table, not exported: %s",
            joined(minus(exported, table)).c_str(), joined(minus(table, exported)).c_str());
  std::printf("    %zu functions of %s exported\n", exported.size(), YALI_NCCL_HEADER_PATH);
}

// ---- Behaviour with a stand-in NCCL -----------------------------------------------------------------

namespace {

void* shimLibrary() {
  static void* handle = dlopen(YALI_NCCL_SHIM_PATH, RTLD_NOW | RTLD_LOCAL);
  return handle;
}

template <typename F>
F shim(const char* name) {
  void* h = shimLibrary();
  return h != nullptr ? reinterpret_cast<F>(dlsym(h, name)) : nullptr;
}
#define SHIM(name) shim<decltype(&::name)>(#name)

// The stand-in NCCL, as libyali-nccl loaded it (on its first forward).
void* fakeLibrary() {
  int version = 0;
  if (SHIM(ncclGetVersion) != nullptr) SHIM(ncclGetVersion)(&version);
  return dlopen(YALI_FAKE_NCCL_PATH, RTLD_NOW | RTLD_NOLOAD);
}

template <typename T>
T& fakeVariable(const char* name) {
  static T dummy{};
  void* h = fakeLibrary();
  void* p = h != nullptr ? dlsym(h, name) : nullptr;
  return p != nullptr ? *static_cast<T*>(p) : dummy;
}
void* lastComm() { return fakeVariable<void*>("fakeLastComm"); }
std::string lastCall() { return fakeVariable<const char*>("fakeLastCall"); }

ncclComm_t makeComm() {
  ncclUniqueId id;
  REQUIRE(SHIM(ncclGetUniqueId)(&id) == ncclSuccess);
  ncclComm_t comm = nullptr;
  REQUIRE(SHIM(ncclCommInitRank)(&comm, 1, id, 0) == ncclSuccess);
  REQUIRE(comm != nullptr);
  return comm;
}

}  // namespace

TEST(forwards_reach_the_named_library) {
  if (shimLibrary() == nullptr) std::printf("    dlopen(%s): %s\n", YALI_NCCL_SHIM_PATH, dlerror());
  REQUIRE(shimLibrary() != nullptr);
  int version = 0;
  CHECK(SHIM(ncclGetVersion)(&version) == ncclSuccess);
  REQUIRE(fakeLibrary() != nullptr);
  CHECK_EQ(version, fakeVariable<int>("fakeVersion"));
  CHECK(std::string(SHIM(ncclGetErrorString)(ncclSuccess)) == "fake: no error");
}

TEST(communicators_are_ours_and_reach_nccl_unwrapped) {
  ncclComm_t comm = makeComm();
  void* real = lastComm();
  CHECK(real != nullptr && static_cast<void*>(comm) != real);  // the program holds our handle
  int n = 0, rank = -1;
  CHECK(SHIM(ncclCommCount)(comm, &n) == ncclSuccess && n == 1);
  CHECK(lastComm() == real);
  CHECK(SHIM(ncclCommUserRank)(comm, &rank) == ncclSuccess && rank == 0);
  // A generic forward (not intercepted) unwraps too.
  CHECK(SHIM(ncclRedOpDestroy)(ncclSum, comm) == ncclSuccess);
  CHECK(lastCall() == "ncclRedOpDestroy" && lastComm() == real);
  // One rank: no YALI communicator, so collectives are NCCL's, under both names.
  CHECK(SHIM(ncclAllReduce)(nullptr, nullptr, 0, ncclFloat32, ncclSum, comm, nullptr) == ncclSuccess);
  CHECK(lastCall() == "ncclAllReduce" && lastComm() == real);
  CHECK(SHIM(pncclBroadcast)(nullptr, nullptr, 0, ncclFloat32, 0, comm, nullptr) == ncclSuccess);
  CHECK(lastCall() == "ncclBroadcast" && lastComm() == real);
  ncclResult_t async = ncclInternalError;
  CHECK(SHIM(ncclCommGetAsyncError)(comm, &async) == ncclSuccess && async == ncclSuccess);
  CHECK(SHIM(ncclCommDestroy)(comm) == ncclSuccess);
  CHECK(lastCall() == "ncclCommDestroy" && lastComm() == real);
}

TEST(nccls_own_handles_pass_through) {
  // What NCCL does when it calls its own API (ncclBcast -> ncclBroadcast): its handle, not ours.
  auto init = reinterpret_cast<decltype(&ncclCommInitRank)>(dlsym(fakeLibrary(), "ncclCommInitRank"));
  REQUIRE(init != nullptr);
  ncclUniqueId id{};
  ncclComm_t raw = nullptr;
  REQUIRE(init(&raw, 1, id, 0) == ncclSuccess);
  CHECK(SHIM(ncclAllReduce)(nullptr, nullptr, 0, ncclFloat32, ncclSum, raw, nullptr) == ncclSuccess);
  CHECK(lastComm() == static_cast<void*>(raw));
  int n = 0;
  CHECK(SHIM(ncclCommCount)(raw, &n) == ncclSuccess && n == 1);
  CHECK(lastComm() == static_cast<void*>(raw));
  CHECK(SHIM(ncclCommDestroy)(raw) == ncclSuccess);
  CHECK(lastComm() == static_cast<void*>(raw));
}

TEST(registration_hands_nccl_its_own_handle) {
  ncclComm_t comm = makeComm();
  void* real = lastComm();
  int buffer = 0;
  void* handle = nullptr;
  CHECK(SHIM(ncclCommRegister)(comm, &buffer, sizeof(buffer), &handle) == ncclSuccess);
  CHECK(lastComm() == real);
  void* token = &fakeVariable<char>("fakeRegistrationToken");
  CHECK(handle != nullptr && handle != token);  // ours, holding NCCL's (and YALI's, none here)
  CHECK(SHIM(ncclCommDeregister)(comm, handle) == ncclSuccess);
  CHECK(lastComm() == real && fakeVariable<void*>("fakeLastHandle") == token);
  CHECK(SHIM(ncclCommDestroy)(comm) == ncclSuccess);
}

namespace {

bool loaded(const char* fileName) {
  struct Search {
    const char* suffix;
    bool found;
  } search{fileName, false};
  dl_iterate_phdr(
      [](struct dl_phdr_info* info, size_t, void* data) -> int {
        auto* s = static_cast<Search*>(data);
        const std::string name = info->dlpi_name != nullptr ? info->dlpi_name : "";
        const size_t at = name.rfind('/');
        if (name.compare(at == std::string::npos ? 0 : at + 1, strlen(s->suffix), s->suffix) == 0) s->found = true;
        return s->found ? 1 : 0;
      },
      &search);
  return search.found;
}

}  // namespace

// libyali and the CUDA runtime are not loaded with libyali-nccl (yali_lib.h says why) nor by
// communicators that YALI cannot take, only by the first group (or a comm it can take). This test
// binary links neither.
TEST(libyali_and_cuda_wait_until_needed) {
  REQUIRE(shimLibrary() != nullptr);
  CHECK(!loaded("libyali.so"));
  CHECK(!loaded("libcudart.so"));
  CHECK(SHIM(ncclGroupStart)() == ncclSuccess);
  CHECK(SHIM(ncclGroupEnd)() == ncclSuccess);
  CHECK_MSG(loaded("libyali.so"), "libyali was not found through libyali-nccl's RUNPATH (or YALI_LIBRARY)");
  CHECK(loaded("libcudart.so"));
}

TEST(groups_reach_nccl_and_defer_the_set_up) {
  int& depth = fakeVariable<int>("fakeGroupDepth");
  CHECK(SHIM(ncclGroupStart)() == ncclSuccess);
  CHECK_EQ(depth, 1);
  ncclComm_t comm = makeComm();  // its set-up waits for the group's end
  CHECK(SHIM(ncclGroupStart)() == ncclSuccess);
  CHECK_EQ(depth, 2);
  CHECK(SHIM(ncclGroupEnd)() == ncclSuccess);
  CHECK(SHIM(ncclGroupEnd)() == ncclSuccess);
  CHECK_EQ(depth, 0);
  int n = 0;
  CHECK(SHIM(ncclCommCount)(comm, &n) == ncclSuccess && n == 1);
  CHECK(SHIM(ncclCommDestroy)(comm) == ncclSuccess);
}

TEST(a_function_the_nccl_lacks_is_an_error) {
  ncclComm_t comm = makeComm();
  CHECK(SHIM(ncclSend)(nullptr, 0, ncclFloat32, 0, comm, nullptr) == ncclInvalidUsage);
  const std::string message = SHIM(ncclGetLastError)(nullptr);
  CHECK_MSG(message.find("ncclSend") != std::string::npos, "ncclGetLastError: %s", message.c_str());
  CHECK(SHIM(ncclCommDestroy)(comm) == ncclSuccess);
}

#ifdef YALI_NCCL_HAS_DEVICE_HEADER
// The device API's host functions (nccl_device.h) take a communicator: forwarded with NCCL's own
// handle, as every function is. (Not exported before: the program's call reached NCCL with our
// handle, which NCCL would have read as its own.) One NCCL lacks answers as any missing function.
TEST(device_api_host_functions_reach_nccl_unwrapped) {
  ncclComm_t comm = makeComm();
  void* real = lastComm();
  ncclDevCommRequirements_t reqs{};
  ncclDevComm_t dev;
  // Typed by hand: nccl_device.h also declares C++ overloads of these names.
  auto devCommCreate = shim<ncclResult_t (*)(ncclComm_t, ncclDevCommRequirements_t const*, ncclDevComm_t*)>(
      "ncclDevCommCreate");
  auto teamWorld = shim<ncclTeam_t (*)(ncclComm_t)>("ncclTeamWorld");
  auto teamRankToWorld = shim<int (*)(ncclComm_t, ncclTeam_t, int)>("ncclTeamRankToWorld");
  REQUIRE(devCommCreate != nullptr && teamWorld != nullptr && teamRankToWorld != nullptr);
  CHECK(devCommCreate(comm, &reqs, &dev) == ncclSuccess);
  CHECK(lastCall() == "ncclDevCommCreate" && lastComm() == real);
  const ncclTeam_t world = teamWorld(comm);
  CHECK(lastCall() == "ncclTeamWorld" && lastComm() == real && world.nRanks == 1);
  // Its profiling alias (libnccl exports pncclTeamWorld; no header declares it) unwraps too.
  auto pTeamWorld = shim<ncclTeam_t (*)(ncclComm_t)>("pncclTeamWorld");
  REQUIRE(pTeamWorld != nullptr);
  fakeVariable<void*>("fakeLastComm") = nullptr;
  CHECK(pTeamWorld(comm).nRanks == 1 && lastComm() == real);
  // Not in the stand-in NCCL: -1, and the reason in ncclGetLastError.
  CHECK_EQ(teamRankToWorld(comm, world, 0), -1);
  const std::string message = SHIM(ncclGetLastError)(nullptr);
  CHECK_MSG(message.find("ncclTeamRankToWorld") != std::string::npos, "ncclGetLastError: %s", message.c_str());
  CHECK(SHIM(ncclCommDestroy)(comm) == ncclSuccess);
}
#endif

namespace {

// The child of never_forwards_to_itself, in a process of its own (the library is found once per
// process): YALI_NCCL_LIBRARY names libyali-nccl itself.
int selfReferenceChild() {
  alarm(60);  // a forward to itself would recurse until the stack overflows, or hang: not pass
  setenv("YALI_NCCL_LIBRARY", YALI_NCCL_SHIM_PATH, 1);
  void* h = dlopen(YALI_NCCL_SHIM_PATH, RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) return 2;
  auto getVersion = reinterpret_cast<decltype(&ncclGetVersion)>(dlsym(h, "ncclGetVersion"));
  auto lastError = reinterpret_cast<decltype(&ncclGetLastError)>(dlsym(h, "ncclGetLastError"));
  int version = 0;
  if (getVersion(&version) != ncclSystemError) return 3;
  const std::string message = lastError(nullptr);
  std::printf("    the child's error: %s\n", message.c_str());
  return message.find("itself") != std::string::npos ? 0 : 4;
}

}  // namespace

TEST(never_forwards_to_itself) {
  std::fflush(stdout);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    execl("/proc/self/exe", "yali-nccl-abi-tests", "--self-reference-child", static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child: %s %d",
            WIFEXITED(status) ? "exit" : "signal", WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
}

// The key that orders a group's deferred calls comm by comm (routing.h, commKeyOfIds, childCommKey;
// intercept.cc, runDeferredCallsOf): the same from the same inputs on every rank, different for
// different unique ids, for a parent's successive children and for different colors (a split's
// children of one call are different comms of different ranks, and a rank sorts only its own).
TEST(group_order_keys_agree_across_ranks_and_tell_comms_apart) {
  ncclUniqueId a, b;
  memset(&a, 7, sizeof a);
  memset(&b, 7, sizeof b);
  b.internal[sizeof b.internal - 1] = 8;  // one byte apart, at the end
  CHECK_EQ(commKeyOfIds(&a, sizeof a), commKeyOfIds(&a, sizeof a));
  CHECK(commKeyOfIds(&a, sizeof a) != commKeyOfIds(&b, sizeof b));
  CHECK(commKeyOfIds(&a, sizeof a) != commKeyOfIds(&a, sizeof a - 1));
  const uint64_t parent = commKeyOfIds(&a, sizeof a);
  std::set<uint64_t> seen{parent};
  for (uint64_t index = 0; index < 4; ++index)
    for (int color : {-2, 0, 1, 7}) {
      const uint64_t key = childCommKey(parent, index, color);
      CHECK_EQ(key, childCommKey(parent, index, color));
      CHECK_MSG(seen.insert(key).second, "index %llu color %d: a repeated key", (unsigned long long)index, color);
    }
  CHECK(childCommKey(parent, 0, 0) != childCommKey(commKeyOfIds(&b, sizeof b), 0, 0));
}

// ---- The rules ----------------------------------------------------------------------------------------

TEST(disable_list) {
  std::string unknown;
  CHECK_EQ(parseDisableList(nullptr, &unknown), 0);
  CHECK_EQ(parseDisableList("", &unknown), 0);
  CHECK_EQ(parseDisableList("allgather,reducescatter", &unknown),
           (1u << yaliCollAllGather) | (1u << yaliCollReduceScatter));
  CHECK(unknown.empty());
  CHECK_EQ(parseDisableList(" AllReduce , BROADCAST,", &unknown),
           (1u << yaliCollAllReduce) | (1u << yaliCollBroadcast));
  CHECK_EQ(parseDisableList("all", &unknown), kAllNcclCollectives | kSendRecvMask);
  CHECK_EQ(parseDisableList("alltoall,all", &unknown), kAllNcclCollectives | kSendRecvMask);
  CHECK_EQ(parseDisableList("SendRecv", &unknown), kSendRecvMask);  // ncclSend and ncclRecv
  CHECK_EQ(parseDisableList("allreduce,sendrecv", &unknown), (1u << yaliCollAllReduce) | kSendRecvMask);
  CHECK((kAllNcclCollectives & kSendRecvMask) == 0);
  CHECK_EQ(parseDisableList("gather,bogus,scatter,alltoallv", &unknown),
           (1u << yaliCollGather) | (1u << yaliCollScatter));
  CHECK_MSG(unknown == "bogus,alltoallv", "unknown = %s", unknown.c_str());  // AlltoAllv has no NCCL call
}

// YALI's registration is opt-in: unset, empty and "0" leave ncclCommRegister NCCL's alone.
TEST(register_setting_is_off_unless_asked_for) {
  CHECK(!parseRegisterSetting(nullptr));
  CHECK(!parseRegisterSetting(""));
  CHECK(!parseRegisterSetting("0"));
  CHECK(parseRegisterSetting("1"));
  CHECK_EQ(kAllNcclCollectives, 0xff);  // AllReduce .. AlltoAll
}

TEST(node_identity) {
  CHECK(nodeIdentity("rack3-node7", "b00t", "host") == "rack3-node7");
  CHECK(nodeIdentity("", "b00t\n", " host ") == "b00t/host");  // empty override: the rule
  CHECK(nodeIdentity(nullptr, "b00t", "") == "b00t/");
  CHECK(nodeIdentity(nullptr, "", "host") == "/host");
  CHECK(nodeIdentity(nullptr, " ", "") == "");  // unknown: never taken to share a node
  const std::string mine = thisNodeIdentity();
  CHECK(!mine.empty());
  CHECK(mine == thisNodeIdentity());
}

namespace {

std::vector<RankRecord> records(int n, const char* node = "boot/host") {
  return std::vector<RankRecord>(n, makeRecord(node, 0, true));
}

}  // namespace

TEST(set_up_verdict) {
  CHECK(yaliTakes(2, nullptr) && yaliTakes(8, nullptr) && !yaliTakes(1, nullptr) && !yaliTakes(9, nullptr));
  SetUpVerdict v = decideSetUp(records(1));
  CHECK(!v.yali && v.why.find("1 rank ") != std::string::npos);
  CHECK(!decideSetUp(records(9)).yali);
  for (int n = 2; n <= 8; ++n) CHECK(decideSetUp(records(n)).yali);
  v = decideSetUp(records(4));
  CHECK(v.yali && v.registerYali && v.disabled == 0);

  std::vector<RankRecord> r = records(4);
  strcpy(r[2].node, "other-boot/host");
  v = decideSetUp(r);
  CHECK(!v.yali && v.why.find("rank 2") != std::string::npos && v.why.find("node") != std::string::npos);
  r = records(2, "");
  CHECK(!decideSetUp(r).yali);  // nobody knows its node

  r = records(3);
  r[1].disabled = 1u << yaliCollAllGather;
  v = decideSetUp(r);
  CHECK(!v.yali && v.why.find("YALI_NCCL_DISABLE differs") != std::string::npos);
  for (RankRecord& x : r) x.disabled = 1u << yaliCollAllGather;
  v = decideSetUp(r);
  CHECK(v.yali && v.disabled == (1u << yaliCollAllGather));
  for (RankRecord& x : r) x.disabled = kAllNcclCollectives;
  CHECK(!decideSetUp(r).yali);  // nothing left for YALI: no comm at all

  r = records(2);
  r[1].registerYali = 0;
  v = decideSetUp(r);
  CHECK(v.yali && !v.registerYali);  // YALI registration only where every rank wants it
  r = records(2);
  r[0].layout = RankRecord::kLayout + 1;
  CHECK(!decideSetUp(r).yali);
  r = records(2);
  r[1] = RankRecord{};  // what a rank that failed before the exchange sends (comm.cc, setUpYali)
  v = decideSetUp(r);
  CHECK_MSG(!v.yali && v.why.find("rank 1's set-up failed") != std::string::npos, "%s", v.why.c_str());
}

TEST(routing_decision_table) {
  struct Row {
    bool hasYali;
    CollectiveMask disabled;
    CallShape call;
    Route expected;
  };
  const ncclRedOp_t custom = static_cast<ncclRedOp_t>(ncclNumOps + 3);  // ncclRedOpCreatePreMulSum's
  const Row rows[] = {
      {true, 0, {yaliCollAllReduce, ncclFloat32, ncclSum}, Route::kYali},
      {false, 0, {yaliCollAllReduce, ncclFloat32, ncclSum}, Route::kNoYaliComm},
      {true, 1u << yaliCollAllReduce, {yaliCollAllReduce, ncclFloat32, ncclSum}, Route::kDisabled},
      {true, 1u << yaliCollAllGather, {yaliCollAllReduce, ncclFloat32, ncclSum}, Route::kYali},
      {true, kAllNcclCollectives, {yaliCollScatter, ncclInt8, ncclSum}, Route::kDisabled},
      {true, 0, {yaliCollAllReduce, ncclBfloat16, custom}, Route::kCustomOp},
      {true, 0, {yaliCollReduceScatter, ncclFloat16, ncclAvg}, Route::kYali},
      {true, 0, {yaliCollReduce, ncclInt32, ncclAvg}, Route::kOpForType},  // avg of integers
      {true, 0, {yaliCollAllReduce, ncclInt64, ncclMax}, Route::kYali},
      {true, 0, {yaliCollAllReduce, ncclFloat8e5m2, ncclProd}, Route::kYali},
      // A program may pass any int (CallShape holds it as one).
      {true, 0, {yaliCollAllReduce, ncclNumTypes, ncclSum}, Route::kUnknownType},
      {true, 0, {yaliCollAllGather, -1, ncclSum}, Route::kUnknownType},
      {true, 0, {yaliCollAllReduce, ncclFloat32, -1}, Route::kCustomOp},
      // Collectives that do not reduce ignore the op, whatever it holds.
      {true, 0, {yaliCollAllGather, ncclInt32, custom}, Route::kYali},
      {true, 0, {yaliCollBroadcast, ncclUint8, ncclAvg}, Route::kYali},
      {true, 0, {yaliCollAlltoAll, ncclFloat64, ncclSum}, Route::kYali},
      {true, 0, {yaliCollGather, ncclBfloat16, ncclSum}, Route::kYali},
  };
  for (const Row& row : rows) {
    const Route got = decideRoute(row.hasYali, row.disabled, row.call);
    CHECK_MSG(got == row.expected, "collective %d, type %d, op %d: %s, expected %s", row.call.collective,
              row.call.type, row.call.op, routeReason(got), routeReason(row.expected));
  }
}

// ---- Creation: whether NCCL makes a communicator blocking ----------------------------------------------

// blockingOf against NCCL 2.28.9's init.cc: parseCommConfig (a config's unset blocking, or one from a
// config older than 2.14, is 1), copyCommConfig (a split's or shrink's NULL config copies the
// parent's) and envConfigOverride (NCCL_COMM_BLOCKING, read as NCCL reads every numeric parameter:
// strtoll with base 0, a value that overflows ignored, overrides when it is 0 or 1). A rank that
// judges this differently from NCCL, or from its peers, treats the comm as the other kind: a
// blocking comm taken for non-blocking loses YALI; the other way round, its set-up is run on a
// comm whose init goes on in NCCL's background. (Review F4: a config whose blocking was unset made a
// split's child take the parent's blocking, where NCCL makes it 1; "01", " 1", "0x1" were ignored.)
// The libraries NCCL 2.28.9 tries as its environment plugin (plugin/env.cc, plugin_open.cc), in its
// order: libyali-nccl asks whether one of them is loaded (ncclEnvPluginInUse).
TEST(env_plugin_candidates_follow_nccls_rule) {
  using V = std::vector<std::string>;
  CHECK(envPluginCandidates(nullptr) == V{"libnccl-env.so"});
  CHECK(envPluginCandidates("") == V{"libnccl-env.so"});
  CHECK(envPluginCandidates("none").empty());
  CHECK(envPluginCandidates("NoNe").empty());
  CHECK((envPluginCandidates("foo") == V{"foo", "libnccl-env-foo.so"}));
  CHECK(envPluginCandidates("libfoo.so") == V{"libfoo.so"});
  CHECK(envPluginCandidates("/opt/x/libfoo.so") == V{"/opt/x/libfoo.so"});
  CHECK(envPluginCandidates("./foo") == V{"./foo"});
  CHECK((envPluginCandidates("libfoo.so.1") == V{"libfoo.so.1", "libnccl-env-libfoo.so.1.so"}));
  CHECK((envPluginCandidates("STATIC_PLUGIN") == V{"", "libnccl-env-STATIC_PLUGIN.so"}));
  CHECK((envPluginCandidates("static") == V{"", "libnccl-env-static.so"}));  // a prefix, any case
}

// A rule of NCCL's for a comm's setting (blockingOf, splitShareOf), one row per case: the config
// (null: none), what a NULL config inherits, the variable (null: unset), and NCCL's verdict.
struct SettingRow {
  const ncclConfig_t* config;
  bool inherited;
  const char* env;
  bool expected;
};

template <size_t N>
void checkSettingRows(bool (*rule)(const ncclConfig_t*, bool, const char*), const char* variable,
                      const SettingRow (&rows)[N]) {
  for (const SettingRow& row : rows) {
    const bool got = rule(row.config, row.inherited, row.env);
    const std::string config =
        row.config == nullptr ? "NULL"
                              : "{blocking " + std::to_string(row.config->blocking) + ", version " +
                                    std::to_string(row.config->version) + ", splitShare " +
                                    std::to_string(row.config->splitShare) + "}";
    CHECK_MSG(got == row.expected, "config %s, inherited %d, %s %s: %d, expected %d", config.c_str(), row.inherited,
              variable, yali_test::quoted(row.env).c_str(), got, row.expected);
  }
}

TEST(split_share_follows_nccls_config_and_environment_rules) {
  auto config = [](int splitShare) {
    ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
    c.splitShare = splitShare;
    return c;
  };
  const ncclConfig_t unset = config(NCCL_CONFIG_UNDEF_INT), zero = config(0), one = config(1);
  const SettingRow rows[] = {
      {nullptr, false, nullptr, false},  // NCCL's default: 0
      {nullptr, true, nullptr, true},    // a split's NULL config copies the parent's
      {&unset, true, nullptr, false},    // a config of its own, unset: 0, not the parent's
      {&one, false, nullptr, true},
      {&zero, true, nullptr, false},
      {&zero, false, "1", true},         // the environment overrides the config ...
      {&one, true, "0", false},
      {nullptr, true, "0", false},       // ... and the parent's
      {&one, true, "2", false},          // another number: 0 (parseCommConfig)
      {&one, true, "abc", false},        // no digits: 0
      {&zero, true, "0x1", true},
      {&one, true, "", true},            // empty: unset
      {&one, true, "99999999999999999999", true},  // overflow (ERANGE): unset
      {&zero, true, "4294967297", true},  // NCCL's `int splitShareEnv`: 2^32 + 1 is 1
      {&one, true, "-2147483648", true},  // NCCL_CONFIG_UNDEF_INT: unset, the config decides
      {&zero, true, "2147483648", false},  // 2^31 is INT_MIN as an int: unset too
  };
  checkSettingRows(splitShareOf, "NCCL_COMM_SPLIT_SHARE_RESOURCES", rows);
}

TEST(blocking_follows_nccls_config_and_environment_rules) {
  auto config = [](int blocking, int version = NCCL_VERSION_CODE) {
    ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
    c.blocking = blocking;
    c.version = version;
    return c;
  };
  const ncclConfig_t unset = config(NCCL_CONFIG_UNDEF_INT), zero = config(0), one = config(1);
  const ncclConfig_t old = config(0, NCCL_VERSION(2, 13, 0));  // predates config.blocking
  const SettingRow rows[] = {
      {nullptr, true, nullptr, true},    // ncclCommInitRank: NCCL's default
      {nullptr, false, nullptr, false},  // a non-blocking parent's split, NULL config: copied
      {&unset, false, nullptr, true},    // a config of its own, blocking unset: 1, not the parent's
      {&unset, true, nullptr, true},
      {&zero, true, nullptr, false},
      {&one, false, nullptr, true},
      {&old, false, nullptr, true},      // NCCL resets blocking of a config older than 2.14
      {&one, true, "0", false},          // the environment overrides the config ...
      {&zero, false, "1", true},
      {nullptr, false, "1", true},       // ... and the parent's
      {&zero, true, "01", true},         // strtoll, base 0
      {&one, true, " 0", false},
      {&zero, true, "0x1", true},
      {&zero, true, "1abc", true},
      {&one, true, "abc", false},        // no digits: 0, no error (NCCL logs "set ... to 0")
      {&zero, true, "2", false},         // neither 0 nor 1: ignored
      {&one, true, "-1", true},
      {&one, true, "", true},            // empty: ignored
      {&one, true, "99999999999999999999", true},  // overflows (ERANGE): ignored
      {&zero, true, "4294967297", true},  // NCCL's `int blockingEnv`: 2^32 + 1 is 1 ...
      {&one, true, "4294967296", false},  // ... and 2^32 is 0
  };
  checkSettingRows(blockingOf, "NCCL_COMM_BLOCKING", rows);
}

// ---- The hierarchical path's plan (several nodes) ------------------------------------------------------

namespace {

// Records for ranks on the given nodes ("a", "b", ...).
std::vector<RankRecord> onNodes(const std::vector<std::string>& nodes) {
  std::vector<RankRecord> r;
  for (const std::string& n : nodes) r.push_back(makeRecord(n, 0, true));
  return r;
}

std::vector<std::string> blockNodes(int nodes, int perNode) {
  std::vector<std::string> out;
  for (int n = 0; n < nodes; ++n)
    for (int l = 0; l < perNode; ++l) out.push_back("node" + std::to_string(n));
  return out;
}

}  // namespace

TEST(node_layouts_and_splits) {
  NodeLayout block = describeNodes(onNodes(blockNodes(2, 2)));
  CHECK_EQ(block.nodes, 2);
  CHECK_EQ(block.localSize, 2);
  CHECK(block.nodeOf == std::vector<int>({0, 0, 1, 1}));
  CHECK(block.localRankOf == std::vector<int>({0, 1, 0, 1}));
  // Round-robin placement: nodes numbered by their lowest rank, local ranks in rank order.
  NodeLayout rr = describeNodes(onNodes({"y", "x", "y", "x", "y", "x"}));
  CHECK_EQ(rr.nodes, 2);
  CHECK_EQ(rr.localSize, 3);
  CHECK(rr.nodeOf == std::vector<int>({0, 1, 0, 1, 0, 1}));
  CHECK(rr.localRankOf == std::vector<int>({0, 0, 1, 1, 2, 2}));
  const SplitKeys k = splitKeys(rr, 3);  // node 1, local rank 1
  CHECK(k.nodeColor == 1 && k.nodeKey == 3 && k.crossColor == 1 && k.crossKey == 1);
  CHECK_EQ(describeNodes(onNodes({"a", "a", "b"})).localSize, 0);  // uneven
  CHECK_EQ(describeNodes(onNodes({"a", "b", "c"})).localSize, 1);
}

TEST(set_up_verdict_across_nodes) {
  SetUpVerdict v = decideSetUp(onNodes(blockNodes(2, 2)));
  CHECK(v.yali && v.hierarchical && !v.registerYali);
  v = decideSetUp(onNodes(blockNodes(2, 8)));  // 16 ranks: 8 per node is YALI's limit
  CHECK(v.yali && v.hierarchical && v.layout.localSize == 8);
  v = decideSetUp(onNodes(blockNodes(2, 9)));
  CHECK(!v.yali && v.why.find("9 ranks") != std::string::npos);
  v = decideSetUp(onNodes(blockNodes(4, 1)));  // a rank per node: nothing for YALI
  CHECK(!v.yali && v.why.find("1 rank") != std::string::npos);
  v = decideSetUp(onNodes({"a", "a", "a", "b", "b", "b", "b"}));  // uneven
  CHECK_MSG(!v.yali && v.why.find("different sizes") != std::string::npos && v.why.find("rank 3") != std::string::npos,
            "%s", v.why.c_str());
  v = decideSetUp(onNodes({"a", "b", "b", "a"}));  // any placement
  CHECK(v.yali && v.hierarchical);
  // A rank whose comm is non-blocking (set up in the background): NCCL only across nodes (the
  // hierarchical path takes blocking comms), YALI on one node.
  std::vector<RankRecord> records = onNodes(blockNodes(2, 2));
  records[3].nonBlocking = 1;
  v = decideSetUp(records);
  CHECK_MSG(!v.yali && !v.hierarchical && v.why.find("rank 3's communicator is non-blocking") != std::string::npos,
            "%s", v.why.c_str());
  records = onNodes(blockNodes(1, 4));
  records[1].nonBlocking = 1;
  CHECK(decideSetUp(records).yali);
  CHECK_EQ(makeRecord("a", 0, true, true).nonBlocking, 1u);
  CHECK_EQ(makeRecord("a", 0, true).nonBlocking, 0u);
  CHECK(!decideSetUp(onNodes(blockNodes(1, 9))).yali);  // one node of 9: as before
  std::vector<RankRecord> r = onNodes(blockNodes(2, 2));
  r[3].disabled = 1u << yaliCollAllReduce;
  CHECK(!decideSetUp(r).yali);  // the settings must agree across nodes too
}

TEST(hierarchical_route_per_call) {
  const NodeLayout l = describeNodes(onNodes(blockNodes(2, 4)));  // 8 ranks, L = 4
  const auto route = [&](yaliCollective_t coll, size_t count, bool capture, size_t scratch, Route r = Route::kYali) {
    return decideHierRoute(l, r, {coll, count, 4, capture, scratch});
  };
  CHECK(route(yaliCollAllReduce, 1000, false, 0) == HierRoute::kHierarchical);
  CHECK(route(yaliCollAllReduce, 4, false, 0) == HierRoute::kHierarchical);
  CHECK(route(yaliCollAllReduce, 3, false, 0) == HierRoute::kTooSmall);  // fewer than L
  CHECK(route(yaliCollAllReduce, 1000, true, 0) == HierRoute::kHierarchical);  // needs no scratch
  // Whether the caller is inside ncclGroupStart/End is no input (routing.h): NCCL lets it differ
  // between ranks. A call in a group runs hierarchical at the group's end (intercept.cc, routeHier).
  CHECK(route(yaliCollAllReduce, 1000, false, 0, Route::kCustomOp) == HierRoute::kRefused);
  CHECK(route(yaliCollAllReduce, 1000, false, 0, Route::kDisabled) == HierRoute::kRefused);
  CHECK(route(yaliCollBroadcast, 1000, false, 0) == HierRoute::kNotHierarchical);
  CHECK(route(yaliCollAlltoAll, 1000, false, 0) == HierRoute::kNotHierarchical);
  CHECK(route(yaliCollAllGather, 0, false, 0) == HierRoute::kTooSmall);
  CHECK(route(yaliCollAllGather, 1, false, 0) == HierRoute::kHierarchical);  // 1 element: fine
  // In a capture: only with the scratch already there (8 ranks * 100 elements * 4 bytes).
  CHECK(route(yaliCollAllGather, 100, true, 3199) == HierRoute::kCaptureNoScratch);
  CHECK(route(yaliCollReduceScatter, 100, true, 3200) == HierRoute::kHierarchical);
  CHECK_EQ(hierScratchBytes(l, {yaliCollReduceScatter, 100, 4, false, 0}), 3200u);
  CHECK_EQ(hierScratchBytes(l, {yaliCollAllReduce, 100, 4, false, 0}), 0u);
}

// A call YALI refused for this rank's buffers is staged (routing.h, stagingLayout): the bytes this
// rank copies in and back are what each collective reads and writes on it (libyali's extentsOf),
// 0 for a buffer the rank does not use, and the output lies after the input at a 256-byte boundary.
TEST(staging_layout_follows_what_each_rank_reads_and_writes) {
  struct Case {
    yaliCollective_t c;
    int rank, root;
    size_t in, out;  // elements (count 10, 4 ranks)
  };
  const Case cases[] = {
      {yaliCollAllReduce, 1, 0, 10, 10},     {yaliCollReduceScatter, 1, 0, 40, 10}, {yaliCollAllGather, 1, 0, 10, 40},
      {yaliCollBroadcast, 2, 2, 10, 10},     {yaliCollBroadcast, 1, 2, 0, 10},      {yaliCollReduce, 2, 2, 10, 10},
      {yaliCollReduce, 1, 2, 10, 0},         {yaliCollGather, 2, 2, 10, 40},        {yaliCollGather, 1, 2, 10, 0},
      {yaliCollScatter, 2, 2, 40, 10},       {yaliCollScatter, 1, 2, 0, 10},        {yaliCollAlltoAll, 1, 0, 40, 40},
  };
  for (const Case& k : cases) {
    const StagingLayout l = stagingLayout(k.c, k.rank, k.root, 4, 10, 4);
    CHECK_MSG(l.sendBytes == k.in * 4 && l.recvBytes == k.out * 4, "collective %d rank %d root %d: %zu in, %zu out",
              k.c, k.rank, k.root, l.sendBytes, l.recvBytes);
    CHECK_EQ(l.recvOffset, k.in == 0 ? 0u : 256u);
    CHECK_EQ(l.totalBytes, l.recvOffset + l.recvBytes);
  }
  // An input of exactly 256 bytes ends where the output starts: disjoint, not overlapping.
  const StagingLayout l = stagingLayout(yaliCollAllReduce, 0, 0, 2, 64, 4);
  CHECK_EQ(l.recvOffset, 256u);
  CHECK_EQ(stagingLayout(yaliCollAllReduce, 0, 0, 2, 65, 4).recvOffset, 512u);
}

TEST(all_reduce_split_and_copy_runs) {
  AllReduceSplit s = allReduceSplit(10, 4);
  CHECK(s.shard == 2 && s.tail == 2);
  s = allReduceSplit(8, 4);
  CHECK(s.shard == 2 && s.tail == 0);
  s = allReduceSplit(3, 4);
  CHECK(s.shard == 0 && s.tail == 3);
  // Block placement is a transpose of blocks: no two consecutive ranks are consecutive slots.
  const NodeLayout block = describeNodes(onNodes(blockNodes(2, 2)));
  std::vector<CopyRun> runs = copyRuns(block);
  CHECK_EQ(runs.size(), 4u);
  CHECK(scratchSlot(block, 1) == 2 && scratchSlot(block, 2) == 1);
  // Round-robin placement is the scratch layout itself: one copy.
  runs = copyRuns(describeNodes(onNodes({"a", "b", "a", "b"})));
  CHECK(runs.size() == 1 && runs[0].blocks == 4 && runs[0].scratch == 0 && runs[0].program == 0);
}

namespace {

// The hierarchical steps on host arrays, with each library step's definition (what YALI's and
// NCCL's collectives do to their comm's ranks), for one layout: the results must equal the flat
// collectives' definitions. Sum over int64, so any order gives the same numbers.
struct Simulation {
  NodeLayout l;
  int n;
  explicit Simulation(const std::vector<std::string>& nodes) : l(describeNodes(onNodes(nodes))), n(int(nodes.size())) {}
  // The rank with this node and local rank.
  int rankAt(int node, int local) const {
    for (int r = 0; r < n; ++r)
      if (l.nodeOf[r] == node && l.localRankOf[r] == local) return r;
    return -1;
  }
  using Buf = std::vector<int64_t>;
  void applyRuns(const Buf& from, Buf& to, size_t block, bool toScratch) const {
    for (const CopyRun& run : copyRuns(l))
      for (size_t i = 0; i < run.blocks * block; ++i) {
        if (toScratch)
          to[run.scratch * block + i] = from[run.program * block + i];
        else
          to[run.program * block + i] = from[run.scratch * block + i];
      }
  }
  // AllGather of `count` elements from each rank: every rank's output in rank order?
  bool allGather(size_t count) const {
    std::vector<Buf> scratch(n, Buf(n * count));
    const size_t part = count * l.nodes;
    for (int r = 0; r < n; ++r)  // cross AllGather: rank (node j, my local) lands at my part + j
      for (int j = 0; j < l.nodes; ++j)
        for (size_t i = 0; i < count; ++i)
          scratch[r][l.localRankOf[r] * part + j * count + i] = rankAt(j, l.localRankOf[r]) * 1000 + int64_t(i);
    std::vector<Buf> node = scratch;  // node AllGather (in place): local rank m's part from its rank
    for (int r = 0; r < n; ++r)
      for (int m = 0; m < l.localSize; ++m)
        for (size_t i = 0; i < part; ++i) node[r][m * part + i] = scratch[rankAt(l.nodeOf[r], m)][m * part + i];
    for (int r = 0; r < n; ++r) {
      Buf out(n * count, -1);
      applyRuns(node[r], out, count, false);
      for (int g = 0; g < n; ++g)
        for (size_t i = 0; i < count; ++i)
          if (out[g * count + i] != g * 1000 + int64_t(i)) return false;
    }
    return true;
  }
  // ReduceScatter of n * count elements: rank r's input element e is r * 100000 + e.
  bool reduceScatter(size_t count) const {
    std::vector<Buf> scratch(n, Buf(n * count));
    for (int r = 0; r < n; ++r) {
      Buf in(n * count);
      for (size_t e = 0; e < in.size(); ++e) in[e] = r * 100000 + int64_t(e);
      applyRuns(in, scratch[r], count, true);
    }
    const size_t part = count * l.nodes;
    for (int r = 0; r < n; ++r) {
      Buf nodeSum(part, 0);  // node ReduceScatter: my part, summed over my node's ranks
      for (int m = 0; m < l.localSize; ++m)
        for (size_t i = 0; i < part; ++i)
          nodeSum[i] += scratch[rankAt(l.nodeOf[r], m)][l.localRankOf[r] * part + i];
      scratch[r].assign(nodeSum.begin(), nodeSum.end());
    }
    for (int r = 0; r < n; ++r)  // cross ReduceScatter: block (my node) of the sum over my local index
      for (size_t i = 0; i < count; ++i) {
        int64_t got = 0, want = 0;
        for (int j = 0; j < l.nodes; ++j) got += scratch[rankAt(j, l.localRankOf[r])][l.nodeOf[r] * count + i];
        for (int q = 0; q < n; ++q) want += q * 100000 + int64_t(r * count + i);
        if (got != want) return false;
      }
    return true;
  }
};

}  // namespace

TEST(hierarchical_steps_give_the_flat_results) {
  const std::vector<std::vector<std::string>> layouts = {
      blockNodes(2, 2), blockNodes(3, 2), blockNodes(2, 4), {"a", "b", "a", "b"}, {"b", "a", "a", "c", "b", "c"},
      {"x", "y", "y", "x", "y", "x"}};
  for (const auto& nodes : layouts) {
    const Simulation sim(nodes);
    for (size_t count : {1, 3, 8}) {
      CHECK_MSG(sim.allGather(count), "AllGather, %zu ranks, count %zu", nodes.size(), count);
      CHECK_MSG(sim.reduceScatter(count), "ReduceScatter, %zu ranks, count %zu", nodes.size(), count);
    }
  }
}

// The hierarchical scratch's order across streams (routing.h, StreamOrder), as YALI orders a
// comm's launches: nothing while one stream is used; at the first change the last user's stream
// is marked and the new one waits; from then on every user records and a user on another stream
// waits; no wait across contexts (a capture and eager work, two captures).
TEST(scratch_stream_order) {
  int a = 0, b = 0;  // two streams' identities
  const void* A = &a;
  const void* B = &b;
  StreamOrder o;
  StreamOrder::Before x = o.before(A, 0);  // first user: nothing to wait for
  CHECK(!x.record && !x.wait);
  CHECK(!o.after(A, 0));
  x = o.before(A, 0);  // same stream: stream order suffices, no event at all
  CHECK(!x.record && !x.wait && !o.after(A, 0) && !o.recordsEveryCall());
  // FSDP2's pattern: an all-gather on A, then a reduce-scatter on B. B must wait for A's last use
  // (its copies out of the scratch); without this the reduce-scatter's copies into the scratch
  // could overwrite it while A still reads.
  x = o.before(B, 0);
  CHECK(x.record && x.recordOn == A && x.wait);
  CHECK(o.after(B, 0));  // from now on every user records
  x = o.before(B, 0);
  CHECK(!x.record && !x.wait);  // same stream again
  CHECK(o.after(B, 0));
  x = o.before(A, 0);  // back on A: waits for B's recorded event
  CHECK(!x.record && x.wait);
  CHECK(o.after(A, 0));
  // A capture (context 7) after eager work: no wait across contexts (the program orders a graph
  // against eager calls, as with NCCL); inside the capture, users on two streams are ordered, with
  // the capture's own event (slot 1), marked at its first change of stream.
  x = o.before(B, 7);
  CHECK(!x.wait && x.slot == 1);
  CHECK(!o.after(B, 7));
  x = o.before(A, 7);
  CHECK(x.record && x.recordOn == B && x.wait && x.slot == 1);
  CHECK(o.after(A, 7));
  // Eager again after the capture: the eager user waits for the last eager one (A), with the eager
  // event. Before, the capture made it forget A: an eager user on B ran beside A's (found by a
  // review; YALI's own launch order had the same gap, src/core/enqueue.cc).
  x = o.before(B, 0);
  CHECK(!x.record && x.wait && x.slot == 0);
  int slot = -1;
  CHECK(o.after(B, 0, &slot) && slot == 0);
  // A second capture starts afresh (nothing of it to wait for).
  x = o.before(A, 8);
  CHECK(!x.wait && !x.record && x.slot == 1);
  // The reviewer's sequence on a fresh order: eager on A, one captured user on B, eager on C.
  int cc = 0;
  const void* C = &cc;
  StreamOrder e;
  CHECK(!e.after(A, 0));
  x = e.before(B, 5);
  CHECK(!x.wait);
  CHECK(!e.after(B, 5));
  x = e.before(C, 0);
  CHECK(x.record && x.recordOn == A && x.wait && x.slot == 0);
  // A fresh order whose first change of stream happens inside a capture marks the last user's
  // stream in that capture.
  StreamOrder c;
  CHECK(!c.after(A, 9));
  x = c.before(B, 9);
  CHECK(x.record && x.recordOn == A && x.wait);
  // The last user on the default stream (nullptr): still recorded there. (Before `record`, a null
  // recordOn meant "nothing to record", and the change of stream went unordered.)
  StreamOrder d;
  CHECK(!d.after(nullptr, 0));
  x = d.before(B, 0);
  CHECK(x.record && x.recordOn == nullptr && x.wait);
}

// cudaStreamPerThread is one handle for another stream in each host thread: a user on it is on the
// last user's stream only when the same thread made both, and it is marked at once (a user on
// another thread cannot mark it later: its record would land on its own thread's stream). Before,
// thread 2's user compared equal to thread 1's and waited for nothing.
TEST(scratch_stream_order_per_thread_stream) {
  const void* P = static_cast<const void*>(cudaStreamPerThread);
  CHECK(StreamOrder::perThread(P));
  // Two threads, the second started after the first was joined: std::thread::id may repeat then
  // (glibc reuses it), the token never does.
  uint64_t t1 = 0, t2 = 0;
  std::thread([&] { t1 = yali::threadToken(); }).join();
  std::thread([&] { t2 = yali::threadToken(); }).join();
  CHECK(t1 != 0 && t2 != 0 && t1 != t2 && yali::threadToken() != t1 && yali::threadToken() == yali::threadToken());
  StreamOrder o;
  StreamOrder::Before x = o.before(P, 0, t1);
  CHECK(!x.record && !x.wait);
  CHECK(o.after(P, 0, nullptr, t1));  // marked at once
  x = o.before(P, 0, t1);             // the same thread: its own stream, stream order suffices
  CHECK(!x.record && !x.wait);
  CHECK(o.after(P, 0, nullptr, t1));
  x = o.before(P, 0, t2);  // another thread's stream: waits for thread 1's mark, records nothing there
  CHECK(!x.record && x.wait && x.slot == 0);
  CHECK(o.after(P, 0, nullptr, t2));
  const void* eager = nullptr;
  uint64_t who = 0;
  CHECK(o.lastEager(&eager, &who) && eager == P && who == t2);
  int a = 0, b = 0;
  const void* A = &a;
  const void* B = &b;
  x = o.before(A, 0, t1);  // a named stream after thread 2's: waits for its mark
  CHECK(!x.record && x.wait);
  CHECK(!o.after(A, 0, nullptr, t1));  // not marked: its stream is marked if and when it changes
  x = o.before(B, 0, t2);
  CHECK(x.record && x.recordOn == A && x.wait);
  CHECK(o.after(B, 0, nullptr, t2));
  // Inside a capture (its own slot) alike.
  x = o.before(P, 3, t1);
  CHECK(!x.wait && x.slot == 1);
  CHECK(o.after(P, 3, nullptr, t1));
  x = o.before(P, 3, t2);
  CHECK(!x.record && x.wait && x.slot == 1);
}

TEST(results_and_size_classes) {
  for (int r = yaliSuccess; r <= yaliInProgress; ++r) CHECK_EQ(toNcclResult(static_cast<yaliResult_t>(r)), r);
  CHECK_EQ(toNcclResult(yaliTimeout), ncclRemoteError);
  CHECK_EQ(toNcclResult(static_cast<yaliResult_t>(42)), ncclInternalError);
  CHECK_EQ(sizeClass(0), 0);
  CHECK_EQ(sizeClass(1), 0);
  CHECK_EQ(sizeClass(4096), 12);
  CHECK_EQ(sizeClass(4097), 12);
  CHECK_EQ(sizeClass(8191), 12);
  CHECK_EQ(sizeClass(size_t(1) << 40), 40);
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "--self-reference-child") == 0) return selfReferenceChild();
  // Before libyali-nccl is first used: it reads its settings and finds NCCL once per process.
  setenv("YALI_NCCL_LIBRARY", YALI_FAKE_NCCL_PATH, 1);
  return yali_test::runAllTests(argc, argv);
}
