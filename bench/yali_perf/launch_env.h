// Where this process sits in a job started by a launcher (mpirun, srun, torchrun), read from the
// environment the launcher sets. Host-only; unit-tested with a fake environment.
#ifndef YALI_PERF_LAUNCH_ENV_H_
#define YALI_PERF_LAUNCH_ENV_H_

#include <functional>
#include <string>

namespace yali_perf {

// Returns the value of an environment variable, or nullptr when it is unset.
using EnvLookup = std::function<const char*(const char*)>;
EnvLookup ProcessEnv();

struct LaunchEnv {
  bool under_launcher = false;  // a launcher's rank/size variables were found
  int rank = 0;
  int size = 1;
  int local_rank = 0;       // the rank among the processes of this machine (selects the GPU)
  std::string source;       // which variables were used, e.g. "OMPI_COMM_WORLD_RANK/SIZE"
  std::string job_id;       // names the rendezvous directory; equal in all processes of a job
  std::string job_id_source;
};

// Reads rank and size from, in this order: OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/PMI_SIZE,
// SLURM_PROCID/SLURM_NTASKS, RANK/WORLD_SIZE. The local rank comes from the matching
// OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID or LOCAL_RANK, else equals the rank
// (all ranks on one machine). The job id: YALI_PERF_JOBID, OMPI_MCA_ess_base_jobid,
// TORCHELASTIC_RUN_ID, SLURM_JOB_ID.SLURM_STEP_ID, else the parent process id (a launcher starts
// all local ranks from one parent). Returns false and sets *error on malformed values
// (rank >= size, non-numbers).
bool DetectLaunchEnv(const EnvLookup& env, int parent_pid, LaunchEnv* out, std::string* error);

}  // namespace yali_perf

#endif  // YALI_PERF_LAUNCH_ENV_H_
