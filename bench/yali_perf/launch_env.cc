#include "launch_env.h"

#include <cerrno>
#include <cstdlib>

namespace yali_perf {
namespace {

bool ParseNonNegative(const char* text, int* value) {
  if (text == nullptr || *text == '\0') return false;
  errno = 0;
  char* end = nullptr;
  long parsed = std::strtol(text, &end, 10);
  if (errno != 0 || *end != '\0' || parsed < 0 || parsed > 1 << 24) return false;
  *value = static_cast<int>(parsed);
  return true;
}

struct LauncherVars {
  const char* rank;
  const char* size;
  const char* local_rank;
};

constexpr LauncherVars kLaunchers[] = {
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
    {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
    {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
    {"RANK", "WORLD_SIZE", "LOCAL_RANK"},
};

}  // namespace

EnvLookup ProcessEnv() {
  return [](const char* name) -> const char* { return std::getenv(name); };
}

bool DetectLaunchEnv(const EnvLookup& env, int parent_pid, LaunchEnv* out, std::string* error) {
  LaunchEnv result;
  for (const LauncherVars& vars : kLaunchers) {
    const char* rank_text = env(vars.rank);
    const char* size_text = env(vars.size);
    if (rank_text == nullptr || size_text == nullptr) continue;
    if (!ParseNonNegative(rank_text, &result.rank) || !ParseNonNegative(size_text, &result.size) ||
        result.size < 1 || result.rank >= result.size) {
      *error = std::string("bad launcher environment: ") + vars.rank + "=" + rank_text + " " +
               vars.size + "=" + size_text;
      return false;
    }
    result.under_launcher = true;
    result.source = std::string(vars.rank) + "/" + vars.size;
    result.local_rank = result.rank;
    const char* local_text = env(vars.local_rank);
    if (local_text != nullptr) {
      if (!ParseNonNegative(local_text, &result.local_rank)) {
        *error = std::string("bad launcher environment: ") + vars.local_rank + "=" + local_text;
        return false;
      }
      result.source += std::string(" (local rank from ") + vars.local_rank + ")";
    }
    break;
  }

  const char* explicit_id = env("YALI_PERF_JOBID");
  const char* ompi_id = env("OMPI_MCA_ess_base_jobid");
  const char* torch_id = env("TORCHELASTIC_RUN_ID");
  const char* slurm_job = env("SLURM_JOB_ID");
  const char* slurm_step = env("SLURM_STEP_ID");
  if (explicit_id != nullptr && *explicit_id != '\0') {
    result.job_id = explicit_id;
    result.job_id_source = "YALI_PERF_JOBID";
  } else if (ompi_id != nullptr && *ompi_id != '\0') {
    result.job_id = ompi_id;
    result.job_id_source = "OMPI_MCA_ess_base_jobid";
  } else if (torch_id != nullptr && *torch_id != '\0') {
    result.job_id = torch_id;
    result.job_id_source = "TORCHELASTIC_RUN_ID";
  } else if (slurm_job != nullptr && *slurm_job != '\0') {
    result.job_id = std::string(slurm_job) + "." + (slurm_step != nullptr ? slurm_step : "0");
    result.job_id_source = "SLURM_JOB_ID.SLURM_STEP_ID";
  } else {
    result.job_id = "ppid" + std::to_string(parent_pid);
    result.job_id_source = "parent process id";
  }
  *out = result;
  return true;
}

}  // namespace yali_perf
