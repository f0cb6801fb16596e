// halbench-coll: `halbench coll` as its own program until it joins halbench.
#include <cstdio>
#include <exception>

int run_collective_benchmark(int argc, char** argv);

int main(int argc, char** argv) {
  try {
    return run_collective_benchmark(argc - 1, argv + 1);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "halbench coll: error: %s\n", error.what());
    return 1;
  }
}
