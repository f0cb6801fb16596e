// Runs torch_sdpa.py (PyTorch's scaled_dot_product_attention on the CPU) as a
// child process and reads its hal.bench/1 JSON, for `halbench attn --compare-torch`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
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
  std::optional<std::uint64_t> iterations;
  // Set in the script's environment (name, value), replacing any value there.
  std::vector<std::pair<std::string, std::string>> environment{};
};

struct TorchRow {
  std::int64_t seq;             // key/value length
  std::int64_t seq_q;           // query length (= seq from a script that does not report it)
  std::string direction;        // "forward" / "backward"
  double ms;                    // median per call
  double cpu_share;             // CPU time / (wall x threads) over its timed calls
  double cpu_seconds_per_call;  // mean; 0 when the script did not report it
  std::string note;             // how torch ran it (e.g. how GQA was handled)
};

struct TorchResults {
  std::vector<TorchRow> rows;  // empty: not measured, see reason
  std::string reason;
  std::string version;
  std::string cpu_capability;  // torch.backends.cpu.get_cpu_capability(); empty when not reported
  int threads = 0;
  Json document;  // the script's whole document
};

// The script: `script` when given, else torch_sdpa.py beside halbench's
// sources, else <prefix>/share/hal/torch_sdpa.py next to the installed binary.
// Throws std::runtime_error when the script cannot be found, cannot be run, or
// fails; a missing torch is a result (rows empty, reason set), not an error.
TorchResults run_torch_sdpa(const TorchRequest& request, const std::string& python,
                            const std::optional<std::string>& script);

}  // namespace halbench
