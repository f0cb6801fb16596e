#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "hal/config.hpp"
#include "hal/settings.hpp"
#include "hal/status.hpp"
#include "scoped_environment.hpp"

namespace fs = std::filesystem;
using hal::testing::ScopedEnvironment;

namespace {

// The message of the hal::Error that parsing `text` throws; fails the test if none.
std::string parse_error(const std::string& text) {
  try {
    hal::Config::parse(text, "test.toml");
  } catch (const hal::Error& error) {
    CHECK(error.code() == hal::StatusCode::invalid_argument);
    return error.status().message();
  }
  FAIL("no error for: " << text);
  return {};
}

// A fresh directory, removed with everything in it at scope exit.
class TemporaryDirectory {
 public:
  TemporaryDirectory() {
    std::string pattern = (fs::temp_directory_path() / "hal_config_test_XXXXXX").string();
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~TemporaryDirectory() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  TemporaryDirectory(const TemporaryDirectory&) = delete;
  TemporaryDirectory& operator=(const TemporaryDirectory&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

class ScopedWorkingDirectory {
 public:
  explicit ScopedWorkingDirectory(const fs::path& path) : old_(fs::current_path()) { fs::current_path(path); }
  ~ScopedWorkingDirectory() { fs::current_path(old_); }
  ScopedWorkingDirectory(const ScopedWorkingDirectory&) = delete;
  ScopedWorkingDirectory& operator=(const ScopedWorkingDirectory&) = delete;

 private:
  fs::path old_;
};

void write_file(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

std::string read_file(const fs::path& path) {
  std::ifstream stream(path);
  REQUIRE_MESSAGE(stream.good(), "cannot open ", path.string());
  return {std::istreambuf_iterator<char>(stream), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_CASE("a file using every key is read back exactly") {
  hal::Config config = hal::Config::parse(R"(
[backends]
filter = "host, cuda"
search_paths = ["/opt/hal/plugins"]

[backend.cuda]
driver = "/x/libcuda.so.1"
max_streams = 8
use_graphs = false

[log]
level = "debug"

[attention]
order = ["flash", "math"]
strict = true
debug = true

[probes]
cache_dir = "/var/cache/hal"

[collectives]
timeout_seconds = 12.5
engine = "gloo"
)",
                                          "/etc/hal/hal.toml");
  CHECK_FALSE(config.source.has_value());
  CHECK(config.backends_filter == std::vector<std::string>{"host", "cuda"});
  CHECK(config.backends_search_paths == std::vector<fs::path>{"/opt/hal/plugins"});
  CHECK(config.backend_options.at("cuda").at("driver") == "/x/libcuda.so.1");
  CHECK(config.backend_options.at("cuda").at("max_streams") == "8");
  CHECK(config.backend_options.at("cuda").at("use_graphs") == "false");
  CHECK(config.log_level == "debug");
  CHECK(config.attention_order == std::vector<std::string>{"flash", "math"});
  CHECK(config.attention_strict);
  CHECK(config.attention_debug);
  CHECK(config.probes_cache_dir == "/var/cache/hal");
  CHECK(config.collectives_timeout_seconds == 12.5);
  CHECK(config.collectives_engine == "gloo");
  CHECK(config.warnings.empty());
}

TEST_CASE("an empty file gives the built-in defaults") {
  hal::Config config = hal::Config::parse("", "empty.toml");
  CHECK(config.backends_filter.empty());
  CHECK(config.log_level == "warning");
  CHECK(config.attention_order.empty());
  CHECK_FALSE(config.attention_strict);
  CHECK(config.probes_cache_dir.empty());
  CHECK(config.collectives_timeout_seconds == 300);
  CHECK(config.collectives_engine == "auto");
  CHECK(config.warnings.empty());
}

TEST_CASE("lists may be arrays or comma-separated strings") {
  hal::Config config = hal::Config::parse("backends.filter = [\"!rocm\"]\nattention.order = \"fused,math\"\n", "t");
  CHECK(config.backends_filter == std::vector<std::string>{"!rocm"});
  CHECK(config.attention_order == std::vector<std::string>{"fused", "math"});
}

TEST_CASE("each bad value names file:line:col and what is allowed") {
  struct BadValue {
    const char* text;
    const char* position;
    const char* allowed;
  };
  const BadValue cases[] = {
      {"[log]\nlevel = \"verbose\"", "test.toml:2:9: log.level: \"verbose\"", R"("debug", "info", "warning", "error")"},
      {"[log]\nlevel = 3", "test.toml:2:9: log.level: got an integer", "one of \"debug\""},
      {"[attention]\norder = [\"flash\", \"fast\"]", "test.toml:2:19: attention.order: \"fast\"",
       R"(each of "fused", "flash", "math" at most once)"},
      {"[attention]\norder = [\"flash\", \"flash\"]", "test.toml:2:19: attention.order: \"flash\" is listed twice",
       "at most once"},
      {"[attention]\nstrict = \"yes\"", "test.toml:2:10: attention.strict: got a string", "true or false"},
      {"[attention]\ndebug = 1", "test.toml:2:9: attention.debug: got an integer", "true or false"},
      {"[backends]\nfilter = \"host,!rocm\"", "test.toml:2:10: backends.filter: \"!rocm\" mixes", "not both"},
      {"[backends]\nfilter = [\"host\", \"CUDA\"]", "test.toml:2:19: backends.filter: \"CUDA\" is not a backend name",
       "lower-case letters, digits and '_'"},
      {"[backends]\nfilter = \"host,,cuda\"", "test.toml:2:10: backends.filter: \"\" is not a backend name",
       "\"!rocm\""},
      {"[backends]\nsearch_paths = [\"\"]", "test.toml:2:17: backends.search_paths: got an empty path",
       "non-empty directory paths"},
      {"[backends]\nsearch_paths = [1]", "test.toml:2:17: backends.search_paths: got an integer", "paths"},
      {"[backend.CUDA]\ndriver = \"x\"", "test.toml:1:10: backend: \"CUDA\" is not a backend name",
       "tables named after a backend"},
      {"[backend.cuda]\ndriver = [\"x\"]", "test.toml:2:10: backend: cuda.driver is an array",
       "string, integer or boolean values"},
      {"backend = 1", "test.toml:1:11: backend: got an integer", "tables named after a backend"},
      {"[probes]\ncache_dir = 5", "test.toml:2:13: probes.cache_dir: got an integer", "a path"},
      {"[collectives]\ntimeout_seconds = 0", "test.toml:2:19: collectives.timeout_seconds: got 0",
       "a number greater than 0"},
      {"[collectives]\ntimeout_seconds = -2.5", "test.toml:2:19: collectives.timeout_seconds: got -2.5",
       "a number greater than 0"},
      {"[collectives]\ntimeout_seconds = nan", "collectives.timeout_seconds: got nan", "greater than 0"},
      {"[collectives]\nengine = \"nccl\"", "test.toml:2:10: collectives.engine: \"nccl\"",
       R"(one of "auto", "gloo", "mpi")"},
      {"log = \"info\"", "test.toml:1:7: log: got a string", "a table with the keys level"},
  };
  for (const BadValue& bad : cases) {
    CAPTURE(bad.text);
    std::string message = parse_error(bad.text);
    CHECK_MESSAGE(message.find(bad.position) != std::string::npos, message);
    CHECK_MESSAGE(message.find(bad.allowed) != std::string::npos, message);
  }
}

TEST_CASE("unknown keys are warned about with their line and a suggestion") {
  hal::Config config = hal::Config::parse(R"([log]
levle = "info"

[atention]
order = "math"

[log2]
x = 1

[collectives]
timeout = 5
strict = true
)",
                                          "site.toml");
  REQUIRE(config.warnings.size() == 5);
  CHECK(config.warnings[0].to_string() ==
        "site.toml:2:1: unknown key \"log.levle\" is ignored; did you mean \"log.level\"?");
  CHECK(config.warnings[1].line == 4);
  CHECK(config.warnings[1].message.find("did you mean \"attention\"?") != std::string::npos);
  CHECK(config.warnings[2].line == 7);
  CHECK(config.warnings[2].message.find("did you mean \"log\"?") != std::string::npos);
  CHECK(config.warnings[3].message.find("did you mean \"collectives.timeout_seconds\"?") != std::string::npos);
  // A key that belongs to another table points there.
  CHECK(config.warnings[4].message.find("did you mean \"attention.strict\"?") != std::string::npos);
  // Known keys next to unknown ones still apply.
  CHECK(config.log_level == "warning");
}

TEST_CASE("an unknown key with no near match lists what the table may hold") {
  hal::Config config = hal::Config::parse("[log]\ncolour = true\n[zzzzzzzz]\n", "t.toml");
  REQUIRE(config.warnings.size() == 2);
  CHECK(config.warnings[0].message.find("[log] may hold level") != std::string::npos);
  CHECK(config.warnings[1].message.find("backends, backend, log, attention, capabilities, probes, collectives") != std::string::npos);
}

TEST_CASE("a TOML syntax error names its line") {
  std::string message = parse_error("[log]\nlevel = \"info\"\nlevel2 = \n");
  CHECK_MESSAGE(message.starts_with("test.toml:3:"), message);
  CHECK(message.find("expected valid TOML") != std::string::npos);
  CHECK(parse_error("[log]\nlevel = \"info\"\n[log]\n").starts_with("test.toml:3:"));
}

TEST_CASE("relative paths resolve against the config file's directory") {
  hal::Config config = hal::Config::parse(R"(
[backends]
search_paths = ["plugins", "/abs/plugins", "../lib/hal"]
[probes]
cache_dir = "cache"
)",
                                          "/opt/site/etc/hal.toml");
  CHECK(config.backends_search_paths ==
        std::vector<fs::path>{"/opt/site/etc/plugins", "/abs/plugins", "/opt/site/lib/hal"});
  CHECK(config.probes_cache_dir == "/opt/site/etc/cache");

  ScopedEnvironment home{{"HOME", "/home/tester"}};
  CHECK(hal::Config::parse("probes.cache_dir = \"~/hal-cache\"", "/etc/hal.toml").probes_cache_dir ==
        "/home/tester/hal-cache");

  TemporaryDirectory directory;
  write_file(directory.path() / "conf" / "hal.toml", "backends.search_paths = \"plugins\"\n");
  ScopedWorkingDirectory working_directory(directory.path());
  hal::Config loaded = hal::Config::load_file("conf/hal.toml");
  CHECK(loaded.source == directory.path() / "conf" / "hal.toml");
  CHECK(loaded.backends_search_paths == std::vector<fs::path>{directory.path() / "conf" / "plugins"});
}

TEST_CASE("load_file reports the path and the operating system's reason") {
  TemporaryDirectory directory;
  try {
    hal::Config::load_file(directory.path() / "missing.toml");
    FAIL("no error");
  } catch (const hal::Error& error) {
    CHECK(error.status().message().find((directory.path() / "missing.toml").string()) != std::string::npos);
    CHECK(error.status().message().find("No such file or directory") != std::string::npos);
  }
  CHECK_THROWS_WITH_AS(hal::Config::load_file(directory.path()), doctest::Contains("Is a directory"), hal::Error);
}

TEST_CASE("search order: HAL_CONFIG alone, else ./hal.toml, XDG_CONFIG_HOME, /etc") {
  TemporaryDirectory directory;
  fs::path working = directory.path() / "work";
  fs::path config_home = directory.path() / "xdg";
  fs::create_directories(working);
  ScopedWorkingDirectory working_directory(working);
  ScopedEnvironment environment{{"HAL_CONFIG", std::nullopt}, {"XDG_CONFIG_HOME", config_home.string()}};

  SUBCASE("the default order") {
    CHECK(hal::Config::search_paths() ==
          std::vector<fs::path>{working / "hal.toml", config_home / "hal" / "hal.toml", "/etc/hal/hal.toml"});
  }
  SUBCASE("a relative XDG_CONFIG_HOME is ignored in favour of ~/.config") {
    ScopedEnvironment relative_xdg{{"XDG_CONFIG_HOME", "relative/dir"}, {"HOME", "/home/tester"}};
    CHECK(hal::Config::search_paths().at(1) == "/home/tester/.config/hal/hal.toml");
  }
  SUBCASE("the first existing file wins") {
    write_file(config_home / "hal" / "hal.toml", "log.level = \"info\"\n");
    CHECK(hal::Config::load_default().source == config_home / "hal" / "hal.toml");
    write_file(working / "hal.toml", "log.level = \"error\"\n");
    hal::Config config = hal::Config::load_default();
    CHECK(config.source == working / "hal.toml");
    CHECK(config.log_level == "error");
  }
  SUBCASE("HAL_CONFIG replaces the search") {
    write_file(working / "hal.toml", "log.level = \"error\"\n");
    fs::path chosen = directory.path() / "chosen.toml";
    write_file(chosen, "log.level = \"debug\"\n");
    ScopedEnvironment hal_config{{"HAL_CONFIG", chosen.string()}};
    CHECK(hal::Config::search_paths() == std::vector<fs::path>{chosen});
    CHECK(hal::Config::load_default().log_level == "debug");
  }
  SUBCASE("HAL_CONFIG naming a missing file is an error") {
    ScopedEnvironment hal_config{{"HAL_CONFIG", (directory.path() / "absent.toml").string()}};
    CHECK_THROWS_WITH_AS(hal::Config::load_default(), doctest::Contains("unset HAL_CONFIG"), hal::Error);
  }
  SUBCASE("no file anywhere gives the defaults") {
    // /etc/hal/hal.toml is outside the test's control; only check the result when it is absent.
    if (!fs::exists("/etc/hal/hal.toml")) {
      hal::Config config = hal::Config::load_default();
      CHECK_FALSE(config.source.has_value());
      CHECK(config.log_level == "warning");
    }
  }
}

TEST_CASE("environment-variable syntax parses with the same rules") {
  CHECK(hal::parse_backend_filter("host,cuda", "HAL_BACKENDS") == std::vector<std::string>{"host", "cuda"});
  CHECK(hal::parse_backend_filter("!rocm, !ppu", "HAL_BACKENDS") == std::vector<std::string>{"!rocm", "!ppu"});
  CHECK(hal::parse_backend_filter("", "HAL_BACKENDS").empty());
  CHECK_THROWS_WITH_AS(hal::parse_backend_filter("host,!rocm", "HAL_BACKENDS"),
                       doctest::Contains("HAL_BACKENDS: \"!rocm\" mixes"), hal::Error);
  CHECK(hal::parse_attention_order("flash,math", "HAL_ATTN_BACKENDS") == std::vector<std::string>{"flash", "math"});
  CHECK_THROWS_WITH_AS(hal::parse_attention_order("flash,cudnn", "HAL_ATTN_BACKENDS"),
                       doctest::Contains("HAL_ATTN_BACKENDS: \"cudnn\" is not allowed, expected each of"), hal::Error);
}

TEST_CASE("docs/config.md documents every key of the schema") {
  std::string docs = read_file(HAL_CONFIG_DOC_PATH);
  for (const hal::ConfigKeyInfo& key : hal::Config::schema()) {
    CAPTURE(key.name);
    CHECK(docs.find("`" + key.name + "`") != std::string::npos);
    if (!key.environment_variable.empty()) {
      CHECK(docs.find("`" + key.environment_variable + "`") != std::string::npos);
    }
    CHECK_FALSE(key.type.empty());
    CHECK_FALSE(key.allowed.empty());
    CHECK_FALSE(key.description.empty());
  }
}

TEST_CASE("settings: each value with where it came from, the environment over the file") {
  ScopedEnvironment environment{{"HAL_ATTN_STRICT", "1"},         {"HAL_BACKEND_PATH", "/env/a: /env/b"},
                                {"HAL_ATTN_BACKENDS", std::nullopt}, {"NVTE_FUSED_ATTN", "0"},
                                {"NVTE_FLASH_ATTN", std::nullopt},   {"NVTE_UNFUSED_ATTN", std::nullopt},
                                {"HAL_LOG_LEVEL", std::nullopt},     {"HAL_COLL_CHECK", "on"},
                                {"HAL_CAPABILITY_OVERRIDES", "attention.flash = false"}};
  const hal::Config file = hal::Config::parse(R"([attention]
strict = false
order = ["math"]

[backends]
search_paths = ["/file/c"]

[backend.cuda]
driver = "/x/libcuda.so.1"

[log]
level = "info"
)",
                                              "/etc/hal/hal.toml");
  const hal::Settings settings = hal::Settings::resolve(file);
  CHECK(settings.values().attention_strict);
  const hal::Setting& strict = settings.at("attention.strict");
  CHECK(strict.value == "true");
  CHECK(strict.source_text() == "HAL_ATTN_STRICT=1");
  CHECK(strict.origin() == "HAL_ATTN_STRICT=1");
  CHECK(strict.environment_variable == "HAL_ATTN_STRICT");
  // The NVTE_* switches set the order when HAL_ATTN_BACKENDS does not.
  CHECK(settings.values().attention_order == std::vector<std::string>{"flash", "math"});
  CHECK(settings.at("attention.order").value == R"(["flash", "math"])");
  CHECK(settings.at("attention.order").source_text() == "NVTE_FUSED_ATTN=0");
  // The file's value where no variable is set, with its line.
  const hal::Setting& level = settings.at("log.level");
  CHECK(level.value == "\"info\"");
  CHECK(level.source_text() == "/etc/hal/hal.toml:12");
  CHECK(level.origin() == "config log.level (/etc/hal/hal.toml:12)");
  // HAL_BACKEND_PATH's directories come first, then the file's.
  CHECK(settings.values().backends_search_paths == std::vector<fs::path>{"/env/a", "/env/b", "/file/c"});
  CHECK(settings.at("backends.search_paths").source_text() == "HAL_BACKEND_PATH=/env/a: /env/b, then /etc/hal/hal.toml:6");
  CHECK(settings.at("backend.cuda.driver").value == "\"/x/libcuda.so.1\"");
  CHECK(settings.at("backend.cuda.driver").source_text() == "/etc/hal/hal.toml:9");
  CHECK(settings.values().collectives_check);
  CHECK(settings.values().capability_overrides == std::vector<std::string>{"attention.flash = false"});
  // Untouched keys are the built-in defaults.
  CHECK(settings.at("collectives.timeout_seconds").value == "300");
  CHECK(settings.at("collectives.timeout_seconds").source_text() == "built-in default");
  CHECK(settings.at("collectives.timeout_seconds").from(hal::SettingSource::Kind::built_in));
  // Every schema key is there once, in schema order.
  std::vector<std::string> keys;
  for (const hal::Setting& setting : settings.entries()) keys.push_back(setting.key);
  CHECK(keys.front() == "backends.filter");
  CHECK(std::count(keys.begin(), keys.end(), "collectives.check") == 1);
  CHECK_THROWS_WITH_AS(settings.at("attention.speed"), doctest::Contains("there is no setting \"attention.speed\""),
                       hal::Error);
}

TEST_CASE("settings: a variable with a value that is not allowed is an error naming it") {
  const std::vector<std::pair<std::pair<std::string, std::string>, std::string>> cases = {
      {{"HAL_ATTN_STRICT", "yes"}, "HAL_ATTN_STRICT='yes' is not allowed; use 1 (or true, on) or 0 (or false, off)"},
      {{"HAL_COLL_ENGINE", "nccl"}, "HAL_COLL_ENGINE='nccl' is not allowed; use one of \"auto\", \"gloo\", \"mpi\""},
      {{"HAL_LOG_LEVEL", "verbose"}, "HAL_LOG_LEVEL='verbose' is not allowed"},
      {{"HAL_ATTN_BACKENDS", "flash,turbo"}, "HAL_ATTN_BACKENDS: \"turbo\" is not allowed"},
      {{"NVTE_FLASH_ATTN", "2"}, "NVTE_FLASH_ATTN=2 is not allowed; use 0 or 1"},
      {{"HAL_BACKENDS", "host,!rocm"}, "HAL_BACKENDS: \"!rocm\" mixes"},
      {{"HAL_CAPABILITY_OVERRIDES", "attention.fused"}, "HAL_CAPABILITY_OVERRIDES: \"attention.fused\" is not capability=value"},
  };
  for (const auto& [variable, message] : cases) {
    CAPTURE(variable.first);
    ScopedEnvironment environment{{variable.first, variable.second}};
    CHECK_THROWS_WITH_AS(hal::Settings::resolve(hal::Config{}), doctest::Contains(message.c_str()), hal::Error);
  }
  // The same mistake in the file names its line.
  CHECK(parse_error("[capabilities]\noverrides = [\"attention.flash\"]\n") ==
        "test.toml:2:14: capabilities.overrides: \"attention.flash\" is not capability=value, expected capability=value "
        "items, e.g. \"attention.fused=false\" or \"attention.flash=true\"");
}

TEST_CASE("settings: the defaults without a file or the environment") {
  ScopedEnvironment environment{{"HAL_ATTN_STRICT", "1"}};
  const hal::Settings defaults;  // reads nothing
  CHECK_FALSE(defaults.values().attention_strict);
  for (const hal::Setting& setting : defaults.entries()) {
    CAPTURE(setting.key);
    CHECK(setting.source_text() == "built-in default");
  }
  CHECK(defaults.entries().size() == hal::Config::schema().size() - 1);  // no backend options
}
