// halinfo: what backends and devices this machine has, and what they can do.
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "hal/hal.hpp"
#include "attention_view.hpp"
#include "config_view.hpp"
#include "info_json.hpp"
#include "telemetry_view.hpp"
#include "text_report.hpp"

namespace {

constexpr int exit_ok = 0;
constexpr int exit_requirement_failed = 1;
constexpr int exit_usage = 2;
constexpr int exit_runtime_error = 3;

constexpr const char* usage_text = R"(usage: halinfo [COMMAND] [OPTIONS]

Shows the backends hal found, their state, and the devices they offer.

Commands:
  (none)            a short summary of backends and devices, one health word each
  health            each device's telemetry: what is wrong first, then every reading,
                    then what is not available and why (exit 1 on a critical problem)
  watch             one row per device per interval (--interval SECONDS, default 1;
                    --count N, default until interrupted; --csv, or --json for JSON lines)
  topo              the device / NUMA node / CPU affinity view (hwloc)
  attention         which attention implementation each device would run, and why
                    not the others (--shape, --dtype, --causal, --alignment,
                    --window, --backward; see docs/attention.md)
  config            every setting in effect, its value and where it came from
                    (built-in default, the config file's line, an environment variable)

Options:
  -v, --verbose     everything: paths tried, version axes, capabilities
  --json            one JSON document (schema hal.info/2, docs/halinfo.md; config:
                    hal.settings/1); with watch, one JSON object per line
  --device ID       only this device: backend:index (host:0), UUID or PCI bus id
  --require N       exit 1 when fewer than N accelerator (non-CPU) devices are present
  -h, --help        this text
  --version         hal's version

Environment: HAL_BACKENDS (host,cuda or !rocm), HAL_BACKEND_PATH, HAL_BACKENDS_FORCE,
HAL_CONFIG, HAL_LOG_LEVEL; see docs/config.md.
Exit status: 0 ok, 1 --require not met or (health) a critical problem, 2 bad usage,
3 hal could not start.
)";

struct Options {
  std::string command;
  bool verbose = false;
  bool json = false;
  std::optional<std::string> device;
  std::optional<long> require;
  halinfo::AttentionQuery attention;
  bool csv = false;
  std::optional<std::string> interval, count;
  halinfo::WatchOptions watch;
};

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "halinfo: %s\nRun 'halinfo --help' for usage.\n", message.c_str());
  std::exit(exit_usage);
}

Options parse_arguments(int argc, char** argv) {
  Options options;
  auto value_of = [&](int& i, const char* flag) -> std::string {
    if (i + 1 >= argc) usage_error(std::string(flag) + " needs a value");
    return argv[++i];
  };
  for (int i = 1; i < argc; ++i) {
    const std::string argument = argv[i];
    if (argument == "-h" || argument == "--help") {
      std::fputs(usage_text, stdout);
      std::exit(exit_ok);
    } else if (argument == "--version") {
      std::printf("halinfo %s\n", HAL_VERSION_STRING);
      std::exit(exit_ok);
    } else if (argument == "-v" || argument == "--verbose") {
      options.verbose = true;
    } else if (argument == "--json") {
      options.json = true;
    } else if (argument == "--device") {
      options.device = value_of(i, "--device");
    } else if (argument == "--require") {
      const std::string text = value_of(i, "--require");
      char* end = nullptr;
      const long count = std::strtol(text.c_str(), &end, 10);
      if (text.empty() || *end != '\0' || count < 0)
        usage_error("--require takes a whole number of devices (0 or more), not '" + text + "'");
      options.require = count;
    } else if (argument == "--csv") {
      options.csv = true;
    } else if (argument == "--interval") {
      options.interval = value_of(i, "--interval");
    } else if (argument == "--count") {
      options.count = value_of(i, "--count");
    } else if ((argument == "topo" || argument == "attention" || argument == "health" || argument == "watch" ||
                argument == "config") &&
               options.command.empty()) {
      options.command = argument;
    } else if (argument == "--shape") {
      options.attention.shape = value_of(i, "--shape");
    } else if (argument == "--dtype") {
      options.attention.dtype = value_of(i, "--dtype");
    } else if (argument == "--causal") {
      options.attention.causal = true;
    } else if (argument == "--alignment") {
      options.attention.alignment = value_of(i, "--alignment");
    } else if (argument == "--window") {
      options.attention.window = value_of(i, "--window");
    } else if (argument == "--backward") {
      options.attention.backward = true;
    } else {
      usage_error("unknown argument '" + argument + "'");
    }
  }
  if (options.command != "watch") {
    if (options.csv || options.interval || options.count)
      usage_error(std::string(options.csv ? "--csv" : options.interval ? "--interval" : "--count") +
                  " goes with the watch command: halinfo watch --interval 1 --count 10 --csv");
    return options;
  }
  if (options.csv && options.json) usage_error("watch takes --csv or --json, not both");
  options.watch.format = options.csv    ? halinfo::WatchFormat::csv
                         : options.json ? halinfo::WatchFormat::json_lines
                                        : halinfo::WatchFormat::table;
  if (options.interval) {
    char* end = nullptr;
    const double seconds = std::strtod(options.interval->c_str(), &end);
    if (options.interval->empty() || *end != '\0' || !std::isfinite(seconds) || seconds < 0.01 || seconds > 86400)
      usage_error("--interval takes seconds from 0.01 to 86400 (e.g. 1 or 0.5), not '" + *options.interval + "'");
    options.watch.interval = std::chrono::milliseconds(std::lround(seconds * 1000));
  }
  if (options.count) {
    char* end = nullptr;
    const long rows = std::strtol(options.count->c_str(), &end, 10);
    if (options.count->empty() || *end != '\0' || rows < 1)
      usage_error("--count takes a whole number of intervals (1 or more), not '" + *options.count + "'");
    options.watch.count = rows;
  }
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse_arguments(argc, argv);
  // hal failing to start (a bad config file or variable) is exit 3 whatever the command.
  auto start = [](auto&& make) {
    try {
      return make();
    } catch (const hal::Error& error) {
      std::fprintf(stderr, "halinfo: %s\n", error.what());
      std::exit(exit_runtime_error);
    }
  };
  try {
    if (options.command == "config") {  // what a runtime would resolve; no plugin is opened
      const hal::Config file = start([] { return hal::Config::load_default(); });
      const hal::Settings settings = start([&] { return hal::Settings::resolve(file); });
      if (options.json)
        std::cout << halinfo::settings_document(file, settings).dump(2) << "\n";
      else
        halinfo::print_settings(file, settings, std::cout);
      return exit_ok;
    }
    const hal::Runtime runtime = start([] { return hal::Runtime::create(); });
    std::vector<hal::Device> devices = runtime.devices();
    if (options.device) devices = {runtime.device(*options.device)};

    if (options.command == "health") {
      bool critical = false;
      if (options.json) {
        for (const hal::Device& device : devices) {
          const nlohmann::json telemetry = halinfo::telemetry_to_json(device);
          for (const auto& problem : telemetry.value("problems", nlohmann::json::array()))
            critical = critical || problem["severity"] == "critical";
          std::cout << nlohmann::json{{"id", device.id()}, {"telemetry", telemetry}}.dump() << "\n";
        }
      } else {
        critical = halinfo::print_health(devices, std::cout);
      }
      return critical ? exit_requirement_failed : exit_ok;
    } else if (options.command == "watch") {
      halinfo::run_watch(devices, options.watch, std::cout);
      return exit_ok;
    } else if (options.command == "attention") {
      halinfo::print_attention(devices, options.attention, options.json, std::cout);
    } else if (options.command == "topo") {
      halinfo::print_topology(runtime, devices, options.json, std::cout);
    } else if (options.json) {
      std::cout << halinfo::info_document(runtime, devices).dump(2) << "\n";
    } else {
      halinfo::print_summary(runtime, devices, options.verbose, std::cout);
    }

    if (options.require) {
      long accelerators = 0;
      for (const auto& device : runtime.devices())
        if (device.info().type != hal::DeviceType::cpu) ++accelerators;
      if (accelerators < *options.require) {
        std::fprintf(stderr, "halinfo: %ld accelerator device(s) present, %ld required\n", accelerators,
                     *options.require);
        return exit_requirement_failed;
      }
    }
    return exit_ok;
  } catch (const hal::Error& error) {
    std::fprintf(stderr, "halinfo: %s\n", error.what());
    // A bad value the user typed is a usage error; anything else is hal failing.
    return error.code() == hal::StatusCode::invalid_argument && (options.device || !options.command.empty())
               ? exit_usage
               : exit_runtime_error;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "halinfo: internal error: %s\n", error.what());
    return exit_runtime_error;
  }
}
