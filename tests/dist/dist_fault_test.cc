// Failures during a distributed save, observed from the survivors.
//
//   ckfmt_dist_fault_tests SCENARIO MODE DIR    (mpirun -np 4, --enable-recovery)
//
// Every rank first saves a "previous" checkpoint to DIR/ck, then saves a new
// one while rank 2 (rank 0 for kill_root) fails at a fixed point:
//   error      it returns an error from the save's fault hook
//   hang       it stops participating for longer than the timeout, then goes on
//   kill       it SIGKILLs itself
//   kill_root  rank 0 SIGKILLs itself
// Checks: every survivor returns an error naming the failing rank within a
// bound of the communicator timeout; DIR/ck still loads as the previous
// checkpoint; rank 0, if alive, removed its temporary file; if rank 0 died,
// the temporary file is the only thing left besides DIR/ck.
//
//   ckfmt_dist_fault_tests resave MODE DIR      (any -np)
// A later save into a directory holding a stale temporary file succeeds and
// removes that file.
//
// Each rank writes PASS or FAIL to DIR.results/rank<N>. With
// --enable-recovery mpirun's exit status does not reflect the ranks', so
// CTest runs the driver, which starts mpirun and then checks that every
// rank expected to survive wrote PASS:
//
//   ckfmt_dist_fault_tests --driver MPIEXEC NP SCENARIO MODE DIR
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "ckfmt/commit.h"
#include "ckfmt/dist/dist_save.h"
#include "ckfmt/dist/mpi_communicator.h"
#include "ckfmt/reader.h"
#include "ckfmt/verify.h"
#include "dist_test_util.h"
#include "util/file_util.h"

namespace {

using namespace ckfmt;
using namespace ckfmt::dist;
using namespace ckfmt_dist_test;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

int g_rank = 0;
int g_failures = 0;
std::string g_results;  // DIR.results

#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      ++g_failures;                                                            \
      std::fprintf(stderr, "[rank %d] CHECK failed at line %d: %s: ", g_rank,  \
                   __LINE__, #cond);                                           \
      std::fprintf(stderr, __VA_ARGS__);                                       \
      std::fprintf(stderr, "\n");                                              \
    }                                                                          \
  } while (0)

constexpr auto kTimeout = std::chrono::milliseconds(1000);

Value LocalState(uint64_t seed, int world, int rank) {
  Value full = MakeFullState(seed);
  return *ShardStateDict(full, MakeLayout(LayoutKind::kFsdp2, full, world, rank));
}

DistSaveOptions Options(SaveMode mode) {
  DistSaveOptions o;
  o.mode = mode;
  o.memory_budget = 1024;
  o.save.chunk_size = 256;
  o.save.fsync = false;
  return o;
}

bool LoadsAs(const std::string& path, uint64_t seed) {
  Value loaded{Dict{}};
  auto r = Load(path, &loaded);
  if (!r.ok()) {
    std::fprintf(stderr, "[rank %d] %s\n", g_rank, r.status().ToString().c_str());
    return false;
  }
  auto m = MatchesFull(loaded, MakeFullState(seed), true);
  if (!m) std::fprintf(stderr, "[rank %d] %s\n", g_rank, m.message());
  return bool(m);
}

int Finish() {
  std::ofstream(g_results + "/rank" + std::to_string(g_rank)) << (g_failures ? "FAIL" : "PASS");
  // A broken communicator may leave requests in flight: never hang here.
  std::signal(SIGALRM, [](int) { _exit(g_failures ? 1 : 0); });
  alarm(2);
  std::fflush(stderr);
  MPI_Finalize();
  return g_failures ? 1 : 0;
}

int Resave(Communicator& comm, SaveMode mode, const std::string& dir) {
  const std::string path = dir + "/ck";
  // The killed rank 0's temporary, made old enough to count as stale
  // (PrepareTemporary): the save removes it, and changes nothing else.
  std::vector<std::string> expected;
  if (comm.rank() == 0) {
    bool stale = false;
    for (const auto& n : ListDir(dir)) {
      if (n.rfind("ck.tmp.", 0) == 0) {
        stale = true;
        ckfmt_test::SetModifiedSecondsAgo(dir + "/" + n, kStaleTemporarySeconds + 5);
      } else {
        expected.push_back(n);
      }
    }
    CHECK(stale, "expected the stale temporary file of the killed rank 0 in %s", dir.c_str());
  }
  auto s = DistSave(comm, path, LocalState(3, comm.size(), comm.rank()), Options(mode));
  CHECK(s.ok(), "%s", s.status().ToString().c_str());
  CHECK(comm.Barrier().ok(), "barrier");
  if (comm.rank() == 0) {
    CHECK(ListDir(dir) == expected,
          "the directory should hold what it held less the stale temporary");
    auto v = VerifyFile(path);
    CHECK(v.ok() && v->ok(), "verify failed");
    CHECK(LoadsAs(path, 3), "the new checkpoint does not load");
  }
  return Finish();
}

std::string Quote(const std::string& s) { return "'" + s + "'"; }

// Runs the scenario under mpirun and checks every expected survivor's result.
int Driver(int argc, char** argv) {
  if (argc != 7) {
    std::fprintf(stderr, "usage: %s --driver MPIEXEC NP SCENARIO MODE DIR\n", argv[0]);
    return 2;
  }
  const std::string mpiexec = argv[2], scenario = argv[4], mode = argv[5], dir = argv[6];
  const int np = std::atoi(argv[3]);
  const std::string results = dir + ".results";
  fs::remove_all(results);
  fs::create_directories(results);
  std::string cmd = Quote(mpiexec) + " --allow-run-as-root --oversubscribe " +
                    (scenario == "resave" ? "" : "--enable-recovery ") + "-np " +
                    std::to_string(np) + " " + Quote(fs::read_symlink("/proc/self/exe").string()) +
                    " " + Quote(scenario) + " " + Quote(mode) + " " + Quote(dir);
  std::fprintf(stderr, "driver: %s\n", cmd.c_str());
  std::fflush(stderr);
  int rc = std::system(cmd.c_str());
  std::fprintf(stderr, "driver: mpirun exited with status %d\n", rc);
  int failed = 0;
  for (int r = 0; r < np; ++r) {
    bool killed = (scenario == "kill" && r == std::min(2, np - 1)) ||
                  (scenario == "kill_root" && r == 0);
    std::ifstream in(results + "/rank" + std::to_string(r));
    std::string verdict;
    in >> verdict;
    if (killed) {
      if (!verdict.empty()) {
        std::fprintf(stderr, "driver: rank %d was to be killed but reported %s\n", r,
                     verdict.c_str());
        ++failed;
      }
    } else if (verdict != "PASS") {
      std::fprintf(stderr, "driver: rank %d reported \"%s\"\n", r, verdict.c_str());
      ++failed;
    }
  }
  std::fprintf(stderr, "driver: %s\n", failed ? "FAIL" : "PASS");
  return failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--driver") return Driver(argc, argv);
  MPI_Init(&argc, &argv);
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s error|hang|kill|kill_root|resave flattened|parallel DIR\n",
                 argv[0]);
    MPI_Finalize();
    return 2;
  }
  const std::string scenario = argv[1], dir = argv[3];
  g_results = dir + ".results";
  const SaveMode mode = std::string(argv[2]) == "parallel" ? SaveMode::kParallel
                                                           : SaveMode::kFlattened;
  auto made = MakeMpiCommunicator(MPI_COMM_WORLD, CommOptions{kTimeout});
  if (!made.ok()) {
    std::fprintf(stderr, "%s\n", made.status().ToString().c_str());
    return 2;
  }
  Communicator& comm = **made;
  g_rank = comm.rank();
  const int world = comm.size();
  if (scenario == "resave") return Resave(comm, mode, dir);

  const int victim = scenario == "kill_root" ? 0 : std::min(2, world - 1);
  const int checker = victim == 0 ? 1 : 0;
  const std::string path = dir + "/ck";
  if (g_rank == 0) {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  CHECK(comm.Barrier().ok(), "barrier");
  auto first = DistSave(comm, path, LocalState(1, world, g_rank), Options(mode));
  CHECK(first.ok(), "the previous checkpoint: %s", first.status().ToString().c_str());

  DistSaveOptions o = Options(mode);
  const char* point = mode == SaveMode::kFlattened ? "bucket" : "data";
  const uint64_t at = mode == SaveMode::kFlattened ? 2 : 0;
  o.fault_hook = [&](const std::string& p, uint64_t index) -> Status {
    if (g_rank != victim || p != point || index != at) return Status::OK();
    if (scenario == "error") return Status::IOError("injected I/O error");
    if (scenario == "hang") std::this_thread::sleep_for(2 * kTimeout + kTimeout / 2);
    if (scenario == "kill" || scenario == "kill_root") std::raise(SIGKILL);
    return Status::OK();
  };
  const auto t0 = Clock::now();
  auto second = DistSave(comm, path, LocalState(2, world, g_rank), o);
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  std::fprintf(stderr, "[rank %d] %s/%s: returned after %.2f s: %s\n", g_rank, scenario.c_str(),
               argv[2], secs, second.status().ToString().c_str());

  CHECK(!second.ok(), "the save succeeded although rank %d failed", victim);
  const std::string victim_name = "rank " + std::to_string(victim);
  if (g_rank != victim) {
    // Survivors: a clear error within a bound of the timeout.
    CHECK(second.status().message().find(victim_name) != std::string::npos,
          "the error does not name %s: %s", victim_name.c_str(),
          second.status().message().c_str());
    const double bound = scenario == "error" ? 1.5 : 3.0 * kTimeout.count() / 1000.0 + 1.0;
    CHECK(secs < bound, "took %.2f s, bound %.2f s", secs, bound);
    if (scenario == "error") {
      CHECK(second.status().code() == StatusCode::kIOError, "code %s",
            StatusCodeName(second.status().code()));
    } else {
      CHECK(second.status().code() == StatusCode::kAborted, "code %s",
            StatusCodeName(second.status().code()));
    }
  }
  if (g_rank == checker) {
    CHECK(LoadsAs(path, 1), "%s is not the previous checkpoint", path.c_str());
    std::vector<std::string> names = ListDir(dir);
    if (victim == 0) {
      // Rank 0 died holding the temporary file: it stays, under its
      // temporary name only.
      CHECK(names.size() == 2 && names[0] == "ck" && names[1].rfind("ck.tmp.", 0) == 0,
            "unexpected directory contents (%zu entries)", names.size());
    } else {
      CHECK(names == std::vector<std::string>{"ck"}, "a temporary file was left (%zu entries)",
            names.size());
    }
  }
  return Finish();
}
