// halrun: environment, output prefixes, and stopping everything when a rank fails.
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "command_output.hpp"

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
