#include "common.hpp"

#include <algorithm>
#include <array>
#include <barrier>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <memory>
#include <system_error>
#include <thread>

#include <unistd.h>

namespace halbench {

// ---- OptionParser ------------------------------------------------------------

OptionParser::OptionParser(std::string command, std::string description)
    : command_(std::move(command)), description_(std::move(description)) {}

void OptionParser::add_switch(std::string name, std::string help, bool& target) {
  options_.push_back({std::move(name), "", std::move(help), [&target](std::string_view) { target = true; }, {}});
}

void OptionParser::add_value(std::string name, std::string value_name, std::string help,
                             std::function<void(std::string_view)> parse) {
  options_.push_back({std::move(name), std::move(value_name), std::move(help), std::move(parse), {}});
}

void OptionParser::add_alias(std::string alias, std::string_view name) {
  const auto option = std::find_if(options_.begin(), options_.end(), [&](const Option& o) { return o.name == name; });
  if (option == options_.end() || find(alias) != nullptr)
    throw std::logic_error("add_alias: '" + alias + "' for '" + std::string(name) + "' names no option or is taken");
  option->aliases.push_back(std::move(alias));
}

const OptionParser::Option* OptionParser::find(std::string_view name) const {
  const auto found = std::find_if(options_.begin(), options_.end(), [&](const Option& o) {
    return o.name == name || std::find(o.aliases.begin(), o.aliases.end(), name) != o.aliases.end();
  });
  return found == options_.end() ? nullptr : &*found;
}

std::string OptionParser::names_of(const Option& option, std::string_view separator) {
  std::string names;
  for (const std::string& alias : option.aliases) names += alias + std::string(separator);
  return names + option.name;
}

bool OptionParser::parse(std::span<const std::string_view> arguments) {
  for (std::size_t i = 0; i < arguments.size(); ++i) {
    const std::string_view argument = arguments[i];
    if (argument == "--help" || argument == "-h") {
      std::fputs(usage().c_str(), stdout);
      return false;
    }
    if (!argument.starts_with("-"))
      throw UsageError("unexpected argument '" + std::string(argument) + "' for " + command_ +
                       "; every option is a flag such as --help");
    const std::size_t equals = argument.find('=');
    const std::string_view name = argument.substr(0, equals);
    const Option* option = find(name);
    if (option == nullptr) {
      std::string known;
      for (const Option& candidate : options_) known += (known.empty() ? "" : ", ") + names_of(candidate, "/");
      throw UsageError("unknown flag '" + std::string(name) + "' for " + command_ + "; its flags are " + known +
                       ", --help");
    }
    if (option->value_name.empty()) {
      if (equals != std::string_view::npos)
        throw UsageError(option->name + " takes no value, but got '" + std::string(argument.substr(equals + 1)) + "'");
      option->apply({});
    } else if (equals != std::string_view::npos) {
      option->apply(argument.substr(equals + 1));
    } else if (i + 1 < arguments.size()) {
      option->apply(arguments[++i]);
    } else {
      throw UsageError(option->name + " needs a value (" + option->value_name + ")");
    }
  }
  return true;
}

std::string OptionParser::usage() const {
  std::string text = "usage: " + command_ + " [options]\n\n" + description_ + "\noptions:\n";
  std::vector<std::string> left_columns;
  std::size_t width = std::string_view("--help").size();
  for (const Option& option : options_) {
    left_columns.push_back(names_of(option, ", ") + (option.value_name.empty() ? "" : " " + option.value_name));
    width = std::max(width, left_columns.back().size());
  }
  auto add_line = [&](const std::string& left, const std::string& help) {
    text += "  " + left + std::string(width - left.size() + 2, ' ');
    // Continuation lines of a help text line up under its first line.
    for (const char character : help) {
      text += character;
      if (character == '\n') text += std::string(width + 4, ' ');
    }
    text += '\n';
  };
  for (std::size_t i = 0; i < options_.size(); ++i) add_line(left_columns[i], options_[i].help);
  add_line("--help", "print this help and exit");
  text += "\nExit status: 0 on success, 1 when a measurement failed, 2 for a bad flag, value or device.\n";
  return text;
}

void add_common_options(OptionParser& parser, CommonOptions& options, std::string iterations_help,
                        std::string_view device_help) {
  parser.add_value("--device", "ID", std::string(device_help),
                   [&options](std::string_view text) { options.device_id = std::string(text); });
  parser.add_value("--iters", "N", std::move(iterations_help),
                   [&options](std::string_view text) { options.iterations = parse_count("--iters", text); });
  parser.add_switch("--json", "print one JSON document (schema hal.bench/1) instead of a table", options.json);
}

bool parse_common_options(std::span<const std::string_view> arguments, std::string command,
                          std::string_view description, CommonOptions& options, std::string iterations_help) {
  OptionParser parser(std::move(command), std::string(description));
  add_common_options(parser, options, std::move(iterations_help));
  return parser.parse(arguments);
}

// ---- value parsing -----------------------------------------------------------------

namespace {

// Parses the leading digits of text; returns how many characters were used.
std::size_t parse_leading_integer(std::string_view flag, std::string_view text, std::uint64_t& value,
                                  std::string_view expected) {
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error == std::errc::result_out_of_range)
    throw UsageError(std::string(flag) + ": '" + std::string(text) + "' is too large");
  if (error != std::errc() || end == text.data())
    throw UsageError(std::string(flag) + ": '" + std::string(text) + "' is not " + std::string(expected));
  return static_cast<std::size_t>(end - text.data());
}

}  // namespace

std::uint64_t parse_count(std::string_view flag, std::string_view text, std::uint64_t minimum) {
  const std::string expected = "a whole number; expected an integer >= " + std::to_string(minimum);
  std::uint64_t value = 0;
  if (parse_leading_integer(flag, text, value, expected) != text.size())
    throw UsageError(std::string(flag) + ": '" + std::string(text) + "' is not " + expected);
  if (value < minimum)
    throw UsageError(std::string(flag) + ": " + std::string(text) + " is too small; expected an integer >= " +
                     std::to_string(minimum));
  return value;
}

std::uint64_t parse_byte_size(std::string_view flag, std::string_view text, std::uint64_t minimum) {
  const std::string expected = "a size; expected bytes such as 4096, 64K, 256MiB or 1G (K, M, G are powers of 1024)";
  std::uint64_t value = 0;
  const std::size_t digits = parse_leading_integer(flag, text, value, expected);
  std::string suffix(text.substr(digits));
  std::transform(suffix.begin(), suffix.end(), suffix.begin(), [](unsigned char c) { return std::tolower(c); });
  struct Unit {
    std::string_view short_name, long_name;
    int shift;
  };
  constexpr std::array units{Unit{"", "b", 0}, Unit{"k", "kib", 10}, Unit{"m", "mib", 20}, Unit{"g", "gib", 30}};
  const auto unit =
      std::find_if(units.begin(), units.end(), [&](const Unit& u) { return suffix == u.short_name || suffix == u.long_name; });
  if (unit == units.end()) throw UsageError(std::string(flag) + ": '" + std::string(text) + "' is not " + expected);
  if (value > (std::numeric_limits<std::uint64_t>::max() >> unit->shift))
    throw UsageError(std::string(flag) + ": '" + std::string(text) + "' is too large");
  if ((value << unit->shift) < minimum)
    throw UsageError(std::string(flag) + ": the size must be at least " + std::to_string(minimum) + " byte" +
                     (minimum == 1 ? "" : "s") + ", got '" + std::string(text) + "'");
  return value << unit->shift;
}

double parse_real(std::string_view flag, std::string_view text, std::string_view expected) {
  const std::string copy(text);
  char* end = nullptr;
  const double value = std::strtod(copy.c_str(), &end);
  if (copy.empty() || end != copy.c_str() + copy.size() || !std::isfinite(value))
    throw UsageError(std::string(flag) + ": '" + copy + "' is not " + std::string(expected));
  return value;
}

std::vector<std::string> split_list(std::string_view flag, std::string_view text) {
  std::vector<std::string> items;
  for (std::size_t start = 0;;) {
    const std::size_t comma = text.find(',', start);
    const std::string_view item = text.substr(start, comma == std::string_view::npos ? text.npos : comma - start);
    if (item.empty())
      throw UsageError(std::string(flag) + ": '" + std::string(text) + "' has an empty item; separate items by single commas");
    items.emplace_back(item);
    if (comma == std::string_view::npos) return items;
    start = comma + 1;
  }
}

BackendSetting backend_setting(const hal::Runtime& runtime, const std::string& backend, const std::string& option) {
  const hal::Settings& settings = runtime.settings();
  const auto& tables = settings.values().backend_options;
  const auto table = tables.find(backend);
  if (table == tables.end()) return {};
  const auto found = table->second.find(option);
  if (found == table->second.end()) return {};
  return {found->second, settings.at("backend." + backend + "." + option).origin()};
}

hal::Device select_device(const hal::Runtime& runtime, const std::optional<std::string>& device_id) {
  const auto& devices = runtime.devices();
  if (devices.empty())
    throw UsageError("there are no devices: no backend loaded one; run halinfo to see why each backend is missing");
  if (!device_id) {
    const auto accelerator = std::find_if(devices.begin(), devices.end(),
                                          [](const hal::Device& d) { return d.info().type != hal::DeviceType::cpu; });
    return accelerator != devices.end() ? *accelerator : devices.front();
  }
  if (std::optional<hal::Device> found = runtime.find_device(*device_id)) return *found;
  std::string there;
  for (const hal::Device& device : devices) there += (there.empty() ? "" : ", ") + device.id() + " (" + device.info().name + ")";
  throw UsageError("--device: there is no device '" + *device_id + "'; the devices here are " + there);
}

// ---- timing and statistics -------------------------------------------------------------

double seconds_between(Clock::time_point start, Clock::time_point end) {
  return std::chrono::duration<double>(end - start).count();
}

double percentile(std::vector<double> samples, double percent) {
  // Nearest rank: the smallest sample with at least percent% of samples at or below it.
  const auto rank = static_cast<std::size_t>(std::ceil(percent / 100.0 * static_cast<double>(samples.size())));
  const std::size_t index = std::clamp<std::size_t>(rank, 1, samples.size()) - 1;
  std::nth_element(samples.begin(), samples.begin() + static_cast<std::ptrdiff_t>(index), samples.end());
  return samples[index];
}

double median(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  const std::size_t middle = samples.size() / 2;
  return samples.size() % 2 == 1 ? samples[middle] : (samples[middle - 1] + samples[middle]) / 2;
}

Interval median_interval(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  const std::size_t n = samples.size();
  const double count = static_cast<double>(n);
  auto probability = [&](std::size_t k) {  // P(Binomial(n, 1/2) = k)
    const double j = static_cast<double>(k);
    return std::exp(std::lgamma(count + 1) - std::lgamma(j + 1) - std::lgamma(count - j + 1) - count * std::log(2.0));
  };
  // The largest k with P(B < k) <= 2.5%: then [x_k, x_(n+1-k)] (1-based)
  // covers the median with at least 95%.
  std::size_t k = 1;
  for (double tail = probability(0); k < n / 2 && tail + probability(k) <= 0.025; ++k) tail += probability(k);
  return {samples[k - 1], samples[n - k]};
}

// ---- output -------------------------------------------------------------------------------

Table::Table(std::vector<Column> columns) : columns_(std::move(columns)) {}

void Table::add_row(std::vector<std::string> cells) {
  cells.resize(columns_.size());
  rows_.push_back(std::move(cells));
}

void Table::print(std::FILE* out) const {
  std::vector<std::size_t> widths;
  for (const Column& column : columns_) widths.push_back(column.header.size());
  for (const auto& row : rows_)
    for (std::size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  auto print_row = [&](auto cell_of) {
    std::string line;
    for (std::size_t i = 0; i < columns_.size(); ++i) {
      const std::string& cell = cell_of(i);
      const std::string padding(widths[i] - cell.size(), ' ');
      line += (i == 0 ? "" : "  ") + (columns_[i].align_left ? cell + padding : padding + cell);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    std::fprintf(out, "%s\n", line.c_str());
  };
  print_row([&](std::size_t i) -> const std::string& { return columns_[i].header; });
  for (const auto& row : rows_) print_row([&](std::size_t i) -> const std::string& { return row[i]; });
}

std::string format_fixed(double value, int decimals) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.*f", decimals, value);
  return text;
}

std::string format_size(std::uint64_t bytes) {
  constexpr std::uint64_t gibibyte = 1024ull * 1024 * 1024;
  if (bytes >= gibibyte && bytes % gibibyte == 0) return std::to_string(bytes / gibibyte) + " GiB";
  return format_fixed(static_cast<double>(bytes) / (1024.0 * 1024.0), bytes % (1024 * 1024) == 0 ? 0 : 1) + " MiB";
}

namespace {

std::string host_name() {
  std::array<char, 256> name{};
  if (gethostname(name.data(), name.size() - 1) != 0) return "unknown";
  return name.data();
}

std::string cpu_model() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (!line.starts_with("model name")) continue;
    const std::size_t colon = line.find(':');
    if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
  }
  return "unknown";
}

// The 1-minute load average: other work on the machine skews every figure,
// so it travels with them.
double load_average() {
  std::ifstream loadavg("/proc/loadavg");
  double one_minute = -1;
  loadavg >> one_minute;
  return loadavg ? one_minute : -1;
}

}  // namespace

Json latency_json(const LatencyResult& latency) {
  return {{"name", latency.name}, {"description", latency.description}, {"iterations", latency.iterations},
          {"p50_us", latency.p50_us}, {"p99_us", latency.p99_us}, {"min_us", latency.min_us},
          {"mean_us", latency.mean_us}};
}

Json make_document(std::string_view benchmark, const hal::Runtime& runtime, const hal::Device& device,
                   Json parameters, Json results) {
  const hal::DeviceInfo& info = device.info();
  const hal::BackendReport* backend = runtime.find_backend(device.backend_name());
  Json document;
  document["schema"] = "hal.bench/1";
  document["benchmark"] = benchmark;
  document["device"] = {{"id", device.id()},
                        {"name", info.name},
                        {"vendor", info.vendor},
                        {"type", hal::to_string(info.type)},
                        {"backend", info.backend},
                        {"uuid", info.uuid},
                        {"total_memory", info.total_memory}};
  document["parameters"] = std::move(parameters);
  document["results"] = std::move(results);
  document["environment"] = {{"hal_version", HAL_VERSION_STRING},
                             {"backend_version", backend != nullptr ? backend->version : ""},
                             {"hostname", host_name()},
                             {"cpu", cpu_model()},
                             {"logical_cpus", std::thread::hardware_concurrency()},
                             {"load_average_1m", load_average()}};
  return document;
}

void print_heading(std::string_view benchmark, const hal::Device& device) {
  std::printf("# halbench %s on %s (%s), hal %s, load average %.2f on %u CPUs\n", std::string(benchmark).c_str(),
              device.id().c_str(), device.info().name.c_str(), HAL_VERSION_STRING, load_average(),
              std::thread::hardware_concurrency());
}

void print_json(const Json& document) { std::printf("%s\n", document.dump(2).c_str()); }

// ---- host memcpy bandwidth -------------------------------------------------

MemcpyBandwidth measure_host_memcpy(std::uint64_t bytes, int threads, int repeats) {
  threads = std::max(threads, 1);
  repeats = std::max(repeats, 1);
  // Not value-initialized: each thread first touches its own share.
  const std::unique_ptr<std::uint8_t[]> source(new std::uint8_t[bytes]);
  const std::unique_ptr<std::uint8_t[]> destination(new std::uint8_t[bytes]);
  constexpr std::uint64_t line = 64;  // shares start on cache-line boundaries
  const std::uint64_t share = (bytes / static_cast<std::uint64_t>(threads) + line - 1) / line * line;
  std::barrier sync(threads);
  std::vector<double> seconds;
  auto work = [&](int thread) {
    const std::uint64_t begin = std::min(bytes, share * static_cast<std::uint64_t>(thread));
    const std::uint64_t count = std::min(bytes, begin + share) - begin;
    std::memset(source.get() + begin, 0x5a, count);
    std::memset(destination.get() + begin, 0, count);
    for (int repeat = 0; repeat <= repeats; ++repeat) {  // repeat 0: untimed
      sync.arrive_and_wait();
      const Clock::time_point start = Clock::now();
      copy_host_memory(destination.get() + begin, source.get() + begin, count);
      sync.arrive_and_wait();
      if (thread == 0 && repeat > 0) seconds.push_back(seconds_between(start, Clock::now()));
    }
  };
  {
    std::vector<std::jthread> others;
    for (int thread = 1; thread < threads; ++thread) others.emplace_back(work, thread);
    work(0);
  }
  MemcpyBandwidth result;
  result.seconds = *std::min_element(seconds.begin(), seconds.end());
  result.gbps = static_cast<double>(bytes) / result.seconds / 1e9;
  result.threads = threads;
  result.bytes = bytes;
  result.repeats = repeats;
  return result;
}

}  // namespace halbench
