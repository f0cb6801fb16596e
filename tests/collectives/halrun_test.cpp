// halrun: environment (one node and several), output prefixes, stopping
// everything when a rank fails, and no rank left behind when halrun is killed.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "command_output.hpp"
#include "shm_names.hpp"

namespace {

struct Result {
  int status;
  std::string output;
};

// stdout and stderr together.
Result run(const std::string& command) {
  const hal::testing::CommandResult result = hal::testing::run_command(command + " 2>&1");
  return {result.exit_code, result.output};
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Running: it exists and is not a zombie waiting to be reaped.
bool alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const std::size_t end = line.rfind(')');
  return end != std::string::npos && end + 2 < line.size() && line[end + 2] != 'Z';
}

// The pid a rank wrote into `path`, once it is there.
pid_t wait_for_pid(const std::filesystem::path& path) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream file(path);
    pid_t pid = 0;
    if (file >> pid && pid > 0) return pid;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return 0;
}

}  // namespace

TEST_CASE("halrun gives every rank the torchrun environment and prefixes its lines") {
  const Result result =
      run(std::string(HALRUN_PATH) + " -n 3 -- sh -c 'echo rank=$RANK of=$WORLD_SIZE local=$LOCAL_RANK/$LOCAL_WORLD_SIZE "
                                     "at=$MASTER_ADDR; echo on-stderr >&2'");
  CHECK(result.status == 0);
  for (const char* rank : {"0", "1", "2"}) {
    CHECK_MESSAGE(contains(result.output, std::string("[") + rank + "] rank=" + rank + " of=3 local=" + rank +
                                              "/3 at=127.0.0.1"),
                  result.output);
    CHECK(contains(result.output, std::string("[") + rank + "] on-stderr"));
  }
}

TEST_CASE("halrun gives the ranks of one job a store token of their own") {
  const std::string command = std::string(HALRUN_PATH) + " -n 2 -- sh -c 'echo token=$HAL_STORE_TOKEN'";
  const Result first = run("env -u HAL_STORE_TOKEN " + command), second = run("env -u HAL_STORE_TOKEN " + command);
  REQUIRE(first.status == 0);
  const std::size_t at = first.output.find("token=");
  REQUIRE(at != std::string::npos);
  const std::string token = first.output.substr(at + 6, 32);
  CHECK(token.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK_MESSAGE(contains(first.output, "[0] token=" + token), first.output);
  CHECK_MESSAGE(contains(first.output, "[1] token=" + token), first.output);
  CHECK_FALSE(contains(second.output, token));  // drawn per job
  CHECK(contains(run("HAL_STORE_TOKEN=given " + command).output, "[1] token=given"));
}

TEST_CASE("halrun stops the other ranks when one fails and names it") {
  const auto start = std::chrono::steady_clock::now();
  const Result result =
      run(std::string(HALRUN_PATH) + " -n 3 sh -c 'if [ $RANK = 1 ]; then exit 7; fi; sleep 30'");
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  CHECK(result.status == 7);
  CHECK_MESSAGE(contains(result.output, "halrun: failed: rank 1 exited with status 7"), result.output);

  const Result killed = run(std::string(HALRUN_PATH) + " -n 2 sh -c 'if [ $RANK = 0 ]; then kill -9 $$; fi; sleep 30'");
  CHECK(killed.status == 128 + 9);
  CHECK_MESSAGE(contains(killed.output, "rank 0 was killed by signal 9"), killed.output);
}

TEST_CASE("halrun rejects bad arguments") {
  CHECK(run(std::string(HALRUN_PATH) + " -n 0 true").status == 2);
  CHECK(run(std::string(HALRUN_PATH) + " -n 2").status == 2);
  CHECK(contains(run(std::string(HALRUN_PATH) + " --bogus true").output, "unknown option '--bogus'"));
}

TEST_CASE("halrun on several nodes numbers its ranks as torchrun does") {
  const Result result = run(std::string(HALRUN_PATH) +
                            " --nnodes 3 --node-rank 1 --nproc-per-node 2 --master-addr node-zero --master-port 29511 -- "
                            "sh -c 'echo rank=$RANK of=$WORLD_SIZE local=$LOCAL_RANK/$LOCAL_WORLD_SIZE "
                            "group=$GROUP_RANK at=$MASTER_ADDR:$MASTER_PORT'");
  CHECK(result.status == 0);
  CHECK_MESSAGE(contains(result.output, "[2] rank=2 of=6 local=0/2 group=1 at=node-zero:29511"), result.output);
  CHECK_MESSAGE(contains(result.output, "[3] rank=3 of=6 local=1/2 group=1 at=node-zero:29511"), result.output);
  CHECK_FALSE(contains(result.output, "[0]"));

  const Result failed = run(std::string(HALRUN_PATH) +
                            " --nnodes 2 --node-rank 1 -n 2 --master-addr node-zero --master-port 29511 "
                            "sh -c 'if [ $RANK = 3 ]; then exit 5; fi; sleep 30'");
  CHECK(failed.status == 5);
  CHECK_MESSAGE(contains(failed.output, "halrun: failed: rank 3 exited with status 5"), failed.output);

  const Result beyond = run(std::string(HALRUN_PATH) + " --nnodes 2 --node-rank 2 -n 1 --master-addr a --master-port 1 true");
  CHECK(beyond.status == 2);
  CHECK_MESSAGE(contains(beyond.output, "--node-rank 2 is not below --nnodes 2"), beyond.output);
  const Result no_master = run(std::string(HALRUN_PATH) + " --nnodes 2 --node-rank 0 -n 1 true");
  CHECK(no_master.status == 2);
  CHECK_MESSAGE(contains(no_master.output, "needs --master-addr and --master-port"), no_master.output);
}

// A launcher killed by SIGKILL (an OOM killer, a scheduler's timeout) must
// not leave its ranks, or what they started, running without it.
TEST_CASE("halrun killed with SIGKILL takes its ranks and their children with it") {
  // Orphans come back to this process, so it can tell a dead rank from a running one.
  REQUIRE(::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
  const std::filesystem::path directory =
      std::filesystem::temp_directory_path() / ("halrun-kill-" + std::to_string(::getpid()));
  std::filesystem::create_directories(directory);
  const std::string script = "sleep 60 & echo $! > " + directory.string() + "/child.$RANK; echo $$ > " +
                             directory.string() + "/rank.$RANK; wait";
  const pid_t halrun = ::fork();
  REQUIRE(halrun >= 0);
  if (halrun == 0) {
    ::execl(HALRUN_PATH, "halrun", "-n", "2", "--", "sh", "-c", script.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  std::vector<pid_t> started;
  for (const char* name : {"rank.0", "rank.1", "child.0", "child.1"}) {
    const pid_t pid = wait_for_pid(directory / name);
    CHECK_MESSAGE(pid > 0, name << " never appeared");
    if (pid > 0) started.push_back(pid);
  }
  for (pid_t pid : started) CHECK(alive(pid));
  REQUIRE(::kill(halrun, SIGKILL) == 0);
  REQUIRE(::waitpid(halrun, nullptr, 0) == halrun);

  const auto killed = std::chrono::steady_clock::now();
  auto any_alive = [&] {
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {  // reap what came back to this process
    }
    for (pid_t pid : started)
      if (alive(pid)) return true;
    return false;
  };
  while (any_alive() && std::chrono::steady_clock::now() - killed < std::chrono::seconds(5))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  CHECK_MESSAGE(!any_alive(), "ranks or their children still running " << seconds << " s after halrun was killed");
  CHECK(seconds < 2.0);
  MESSAGE("every rank and child gone " << seconds << " s after halrun's SIGKILL");
  if (any_alive())
    for (pid_t pid : started) ::kill(pid, SIGKILL);  // the check above failed: leave nothing behind
  ::prctl(PR_SET_CHILD_SUBREAPER, 0);
  std::filesystem::remove_all(directory);
}

TEST_CASE("halrun removes the shared-memory segments its killed job left, and no others") {
  char name[] = "/tmp/halrun-shm-XXXXXX";
  REQUIRE(::mkdtemp(name) != nullptr);
  const std::filesystem::path directory = name;
  const std::filesystem::path ours = directory / (hal::abi::shm_job_prefix("halrun-test-token") + "0123456789abcdef");
  const std::filesystem::path others = directory / (hal::abi::shm_job_prefix("another-job") + "0123456789abcdef");
  std::ofstream(ours) << "segment";
  std::ofstream(others) << "segment";
  const Result result = run("HAL_STORE_TOKEN=halrun-test-token HAL_SHM_DIR=" + directory.string() +
                            " " HALRUN_PATH " -n 2 -- /bin/sh -c 'kill -9 $$'");
  CHECK_MESSAGE(result.status != 0, result.output);
  CHECK(!std::filesystem::exists(ours));
  CHECK(std::filesystem::exists(others));
  std::filesystem::remove_all(directory);
}
