// main() for the MPI test binaries: MPI_Init, GoogleTest, MPI_Finalize.
// Rank 0 prints the usual report; other ranks print only their failures,
// prefixed with the rank. Every rank's exit code counts (mpirun fails if
// one rank fails).
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>

namespace {

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: %s\n", rank_, r.file_name() ? r.file_name() : "?",
                 r.line_number(), r.summary());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  int rc = RUN_ALL_TESTS();
  // A test that broke a communicator may leave requests in flight; never
  // let MPI_Finalize hang the job.
  std::signal(SIGALRM, [](int) { _exit(3); });
  alarm(30);
  MPI_Finalize();
  return rc;
}
