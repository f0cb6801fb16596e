// Copies bytes through the first device hal finds and checks they came back.
#include <cstdio>
#include <numeric>
#include <vector>

#include <hal/hal.hpp>

int main() {
  try {
    const hal::Runtime runtime = hal::Runtime::create();
    if (runtime.devices().empty()) {
      std::fprintf(stderr, "no hal device found; run halinfo to see why\n");
      return 1;
    }
    const hal::Device& device = runtime.devices().front();
    std::vector<int> input(1024), output(1024, 0);
    std::iota(input.begin(), input.end(), 0);
    const std::size_t bytes = input.size() * sizeof(int);
    hal::Buffer buffer = device.allocate(bytes);
    hal::Stream stream = device.create_stream();
    stream.copy_to_device(buffer, 0, input.data(), bytes);
    stream.copy_to_host(output.data(), buffer, 0, bytes);
    stream.synchronize();
    if (output != input) {
      std::fprintf(stderr, "round trip through %s returned different bytes\n", device.id().c_str());
      return 1;
    }
    std::printf("round trip of %zu bytes through %s (%s): ok\n", bytes, device.id().c_str(),
                device.info().name.c_str());
    return 0;
  } catch (const hal::Error& error) {
    std::fprintf(stderr, "hal error: %s\n", error.what());
    return 1;
  }
}
