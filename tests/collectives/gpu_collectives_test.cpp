// The GPU backends' NCCL engine (backends/gpu/nccl_collectives) across
// processes: the cuda backend on the fake CUDA driver and the fake NCCL, the
// rocm backend on the fake HIP runtime and the fake library under RCCL's name.
// Each rank is a collectives_worker (see worker.cpp), checking its results
// against values computed from every rank's inputs.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "launch.hpp"
#include "scratch_directory.hpp"

using namespace std::chrono_literals;
using hal::testing::launch_ranks;
using hal::testing::RankOutcome;
using Environment = std::vector<std::pair<std::string, std::string>>;

namespace {

[[maybe_unused]] bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

// A directory for the fake library's rendezvous, removed afterwards.
struct RendezvousDirectory : hal::testing::ScratchDirectory {
  RendezvousDirectory() : ScratchDirectory("/tmp/hal-fake-nccl-XXXXXX") {}
};

#ifdef HAL_FAKE_CUDA_DRIVER
Environment cuda_environment(const std::string& nccl, const std::string& directory) {
  return {{"HAL_BACKEND_PATH", HAL_PLUGIN_DIR},  {"HAL_BACKENDS", "cuda"},     {"HAL_CONFIG", ""},
          {"HAL_CUDA_DRIVER", HAL_FAKE_CUDA_DRIVER}, {"HAL_NCCL", nccl},      {"HAL_FAKE_NCCL_DIR", directory},
          {"HAL_TEST_DEVICE", "cuda"},           {"HAL_FAKE_CUDA_DEVICES", "3"}};  // one device per rank
}
#endif

std::vector<RankOutcome> run(int ranks, std::vector<std::string> arguments, const Environment& environment) {
  arguments.insert(arguments.begin(), HAL_COLLECTIVES_WORKER);
  return launch_ranks(ranks, arguments, environment, 60s);
}

void check_all_passed(const std::vector<RankOutcome>& outcomes) {
  bool all = true;
  for (const auto& outcome : outcomes) all = all && outcome.passed();
  CHECK_MESSAGE(all, hal::testing::describe(outcomes));
}

[[maybe_unused]] Environment with(Environment environment, const Environment& more) {
  environment.insert(environment.end(), more.begin(), more.end());
  return environment;
}

}  // namespace

#ifdef HAL_FAKE_NCCL
TEST_CASE("cuda + NCCL: every operation, type and in-place mode, on 2 and 3 ranks") {
  for (const int ranks : {2, 3}) {
    CAPTURE(ranks);
    RendezvousDirectory directory;
    const auto outcomes = run(ranks, {"ops"}, with(cuda_environment(HAL_FAKE_NCCL, directory.path),
                                                   {{"HAL_TEST_EXPECT_ENGINE", "nccl"}}));
    check_all_passed(outcomes);
  }
}

TEST_CASE("cuda + NCCL: two ranks on one GPU are refused at init, as NCCL refuses them") {
  RendezvousDirectory directory;
  const auto outcomes = run(2, {"ops"}, with(cuda_environment(HAL_FAKE_NCCL, directory.path),
                                             {{"HAL_TEST_DEVICE", "cuda:0"}}));
  for (const auto& outcome : outcomes) {
    CHECK_MESSAGE(outcome.exit_code != 0, hal::testing::describe(outcomes));
    CHECK_MESSAGE(contains(outcome.output, "Duplicate GPU detected"), outcome.output);
  }
}

TEST_CASE("cuda + NCCL: grouped send/recv around a ring of 3") {
  RendezvousDirectory directory;
  check_all_passed(run(3, {"p2p"}, cuda_environment(HAL_FAKE_NCCL, directory.path)));
}

TEST_CASE("cuda + NCCL: a rank that never creates its communicator is a timeout naming it") {
  RendezvousDirectory directory;
  check_all_passed(run(3, {"missing", "2"}, cuda_environment(HAL_FAKE_NCCL, directory.path)));
}

TEST_CASE("cuda + NCCL: an init that never completes is a timeout, not a hang") {
  RendezvousDirectory directory;
  const auto outcomes = run(2, {"fault"}, with(cuda_environment(HAL_FAKE_NCCL, directory.path),
                                               {{"HAL_FAKE_NCCL_INIT_HANG_RANK", "1"}}));
  // Every rank arrived in the store, so the library's init is what stalls:
  // both ranks fail to create the communicator after the 1.5 s timeout.
  for (const auto& outcome : outcomes) {
    CHECK_MESSAGE(outcome.exit_code == 1, hal::testing::describe(outcomes));
    CHECK_MESSAGE(contains(outcome.output, "ncclCommInitRankConfig did not complete within 1500 ms"), outcome.output);
  }
}

TEST_CASE("cuda + NCCL: an operation that hangs times out, naming op, sequence and rank") {
  RendezvousDirectory directory;
  const auto outcomes = run(2, {"fault"}, with(cuda_environment(HAL_FAKE_NCCL, directory.path),
                                               {{"HAL_FAKE_NCCL_HANG", "1:2"}}));
  check_all_passed(outcomes);
  for (int rank = 0; rank < 2; ++rank) {
    const std::string& output = outcomes[static_cast<std::size_t>(rank)].output;
    CHECK_MESSAGE(contains(output, "code=timeout"), output);
    CHECK_MESSAGE(contains(output, "rank " + std::to_string(rank) + ": all_reduce #2"), output);
    CHECK_MESSAGE(contains(output, "did not complete within 1500 ms"), output);
  }
}

TEST_CASE("cuda + NCCL: an asynchronous error is reported with the library's text") {
  RendezvousDirectory directory;
  const auto outcomes = run(2, {"fault"}, with(cuda_environment(HAL_FAKE_NCCL, directory.path),
                                               {{"HAL_FAKE_NCCL_ASYNC_ERROR", "0:2"}}));
  check_all_passed(outcomes);
  const std::string& failing = outcomes[0].output;
  CHECK_MESSAGE(contains(failing, "code=device_lost"), failing);
  CHECK_MESSAGE(contains(failing, "asynchronous error: remote process exited or there was a network error"), failing);
  CHECK_MESSAGE(contains(failing, "HAL_FAKE_NCCL_ASYNC_ERROR"), failing);  // ncclGetLastError's text
  CHECK_MESSAGE(contains(failing, "all_reduce #2"), failing);
  // Its peer waits for data that never comes: its own timeout.
  CHECK_MESSAGE(contains(outcomes[1].output, "code=timeout"), outcomes[1].output);
}

TEST_CASE("cuda + NCCL: abort from another thread ends a blocked operation with aborted") {
  RendezvousDirectory directory;
  check_all_passed(run(2, {"abort"}, cuda_environment(HAL_FAKE_NCCL, directory.path)));
}
#endif

#ifdef HAL_FAKE_NCCL_LEGACY
TEST_CASE("cuda + NCCL 2.8: all_to_all, gather, scatter from send/recv; bf16 and avg unsupported") {
  RendezvousDirectory directory;
  const auto outcomes = run(2, {"legacy"}, with(cuda_environment(HAL_FAKE_NCCL_LEGACY, directory.path),
                                                {{"HAL_TEST_EXPECT_ENGINE", "nccl"}}));
  check_all_passed(outcomes);
  CHECK_MESSAGE(contains(outcomes[0].output, "has no bf16"), outcomes[0].output);
}
#endif

#ifdef HAL_FAKE_CUDA_DRIVER
TEST_CASE("cuda without an NCCL library: communicator_create fails with the paths tried") {
  // One rank: the check fails before any peer would be needed.
  const auto outcomes =
      run(1, {"engine"},
          with(cuda_environment("/nonexistent/libnccl.so.2", "/tmp"),
               {{"HAL_TEST_EXPECT_ENGINE", ""}, {"HAL_TEST_EXPECT_REASON", "Tried: "}, {"HAL_TEST_EXPECT_CODE", "not_present"}}));
  check_all_passed(outcomes);
  CHECK_MESSAGE(contains(outcomes[0].output, "/nonexistent/libnccl.so.2"), outcomes[0].output);
}
#endif

#ifdef HAL_FAKE_RCCL
TEST_CASE("rocm + RCCL: the same engine on HIP streams, under RCCL's name") {
  RendezvousDirectory directory;
  const Environment environment = {{"HAL_BACKEND_PATH", HAL_PLUGIN_DIR},
                                   {"HAL_BACKENDS", "rocm"},
                                   {"HAL_CONFIG", ""},
                                   {"HAL_HIP_RUNTIME", HAL_FAKE_HIP_RUNTIME},
                                   {"HAL_RCCL", HAL_FAKE_RCCL},
                                   {"HAL_FAKE_NCCL_DIR", directory.path},
                                   {"HAL_FAKE_HIP_DEVICES", "3"},  // one device per rank
                                   {"HAL_TEST_DEVICE", "rocm"},
                                   {"HAL_TEST_EXPECT_ENGINE", "rccl"}};
  check_all_passed(run(2, {"p2p"}, environment));
  check_all_passed(run(2, {"ops"}, environment));
  // ROCm 5's runtime has no hipLaunchHostFunc: the library's work goes through hipStreamAddCallback.
  RendezvousDirectory rocm5_directory;
  Environment rocm5 = environment;
  for (auto& [name, value] : rocm5) {
    if (name == "HAL_HIP_RUNTIME") value = HAL_FAKE_HIP_ROCM5_RUNTIME;
    if (name == "HAL_FAKE_NCCL_DIR") value = rocm5_directory.path;
  }
  check_all_passed(run(3, {"p2p"}, rocm5));
}
#endif
