// PyTorch's scaled_dot_product_attention on the CPU beside hal, for
// `halbench attn --compare-torch`: torch_sdpa.py --serve runs as a child
// process and times one torch call whenever asked, so halbench can alternate
// hal's calls and torch's one by one (ABAB...) and the machine's noise falls
// on both.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common.hpp"

namespace halbench {

struct TorchRequest {
  std::vector<std::int64_t> seqs;    // key/value lengths (and query lengths when seq_qs is empty)
  std::vector<std::int64_t> seq_qs;  // --seq-q: query lengths, every pair with seqs; empty: none given
  std::int64_t batch, heads_q, heads_kv, head_dim;
  std::string dtype;  // f32, f16, bf16
  bool causal;
  bool backward;  // forward and backward; else forward only
  int threads;    // torch.set_num_threads
  // Set in the script's environment (name, value), replacing any value there.
  std::vector<std::pair<std::string, std::string>> environment{};
};

// One torch call as the script timed it.
struct TorchCall {
  double wall_seconds;
  double cpu_seconds;  // the script's process, every thread
};

// The running script. Its OpenMP threads sleep between calls
// (OMP_WAIT_POLICY=PASSIVE unless the environment sets it), so they do not
// spin on the CPUs while hal's call runs.
class TorchPeer {
 public:
  // The script: `script` when given, else torch_sdpa.py beside halbench's
  // sources, else <prefix>/share/hal/torch_sdpa.py next to the installed
  // binary. Throws std::runtime_error when it cannot be found or run, or its
  // first line is not its document; a missing torch is a state (reason()).
  TorchPeer(const TorchRequest& request, const std::string& python, const std::optional<std::string>& script);
  ~TorchPeer();
  TorchPeer(const TorchPeer&) = delete;
  TorchPeer& operator=(const TorchPeer&) = delete;

  // Empty when torch measures; else why not (torch is not importable).
  const std::string& reason() const { return reason_; }
  const Json& document() const { return document_; }  // the script's, with its cases
  std::string version() const;
  std::string cpu_capability() const;  // empty when not reported
  int threads() const;
  // The script's case for this shape and direction, or none.
  std::optional<std::size_t> find_case(std::int64_t seq_q, std::int64_t seq_kv, std::string_view direction) const;
  std::string note(std::size_t case_index) const;  // how torch runs the case ("" when plainly)
  // Runs one call of the case. Throws std::runtime_error when the script
  // died or answered something else.
  TorchCall call(std::size_t case_index);

 private:
  std::string read_line();
  void stop();  // ends the script and waits for it

  std::string script_;
  pid_t child_ = -1;
  std::FILE* to_child_ = nullptr;
  std::FILE* from_child_ = nullptr;
  Json document_;
  std::string reason_;
};

}  // namespace halbench
