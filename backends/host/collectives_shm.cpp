// The shared-memory engine of the host collectives: ranks on one host meet
// in a segment of HAL_SHM_DIR (/dev/shm) and run all_reduce, reduce,
// reduce_scatter, all_gather, broadcast and barrier through it; every other
// operation goes to the engine beside it (Gloo or MPI).
//
// The segment holds a header, one line per rank (its arrival count, the
// operation it runs, its pid) and two areas per rank. Ranks advance in
// phases: in phase c a rank writes only its own area c % 2, then arrives
// (its count becomes c + 1) and waits until every rank has; in phase c + 1
// it reads anyone's area c % 2. No rank writes that area again before every
// rank has arrived once more, so one arrival per phase is all the
// synchronisation there is. Waiting spins briefly, then sleeps on a futex in
// the header; a sleeping rank notices a peer's death (its pidfd), an abort,
// a failure a peer published in the header, and its own timeout.
//
// The segment's name starts with the job's prefix (shm_names.hpp) and ends
// in random digits drawn by rank 0 and passed through the job's store; it is
// unlinked as soon as every rank has mapped it, so nothing remains once the
// ranks are gone, whichever way they went.
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "collectives.hpp"
#include "collectives_engine.hpp"
#include "reduction.hpp"
#include "shm_kernels.hpp"
#include "shm_names.hpp"
#include "spin_wait.hpp"
#include "store_values.hpp"

namespace hal::host {
namespace {

using Clock = std::chrono::steady_clock;
using Milliseconds = std::chrono::milliseconds;

constexpr std::uint64_t kMagic = 0x316d68732d6c6168ull;  // "hal-shm1"
// Each rank's area, per parity: one round of a large operation.
constexpr std::uint64_t kDefaultAreaBytes = std::uint64_t{1} << 20;
constexpr std::uint64_t kMinimumAreaBytes = 4096;
// Up to this size an all_reduce is one phase, every rank reducing every
// rank's copy; above it, reduce-scatter then all-gather (two phases a round).
constexpr std::uint64_t kOneShotBytes = 32 * 1024;
// Waiting spins, then yields the CPU between looks, for longer than a
// sleeping peer takes to wake (tens of microseconds in a VM): shorter, and
// ranks that wake each other in turn would sleep at every phase.
constexpr auto kSpin = std::chrono::microseconds(20);
constexpr auto kYield = std::chrono::microseconds(2000);
constexpr auto kSleep = Milliseconds(20);
constexpr auto kLivenessPeriod = Milliseconds(100);

struct alignas(128) Header {
  std::uint64_t magic;
  std::uint64_t world_size;
  std::uint64_t area_bytes;
  std::uint32_t epoch;        // futex word: bumped on an arrival while someone sleeps
  std::uint32_t sleepers;     // ranks inside a futex wait
  std::int32_t broken;        // 0, or the rank + 1 of the first rank that failed
  std::int32_t broken_ready;  // broken_message is written
  char broken_message[1024];
};

struct alignas(128) RankLine {
  std::uint64_t arrivals;         // phases this rank has finished
  std::uint64_t signature[2][4];  // by phase parity: the operation (see signature_of)
  std::int64_t pid;
};

template <typename T>
std::atomic_ref<T> shared(T& value) {
  return std::atomic_ref<T>(value);
}

void futex_wait(std::uint32_t* word, std::uint32_t seen, Milliseconds timeout) {
  const timespec limit{static_cast<time_t>(timeout.count() / 1000),
                       static_cast<long>(timeout.count() % 1000) * 1000000};
  ::syscall(SYS_futex, word, FUTEX_WAIT, seen, &limit, nullptr, 0);
}

void futex_wake(std::uint32_t* word) { ::syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0); }

std::string format_bytes(std::uint64_t bytes) {
  char text[48];
  if (bytes >= (std::uint64_t{1} << 30))
    std::snprintf(text, sizeof(text), "%.1f GiB", static_cast<double>(bytes) / (1 << 30));
  else if (bytes >= (std::uint64_t{1} << 20))
    std::snprintf(text, sizeof(text), "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  else
    std::snprintf(text, sizeof(text), "%llu bytes", static_cast<unsigned long long>(bytes));
  return text;
}

// What identifies the shared memory of this host: the boot, the directory's
// file system, the pid namespace (whose pids the segment's lines hold) and
// the network namespace (separate ones stand for separate hosts, as in
// containers and in the multi-host test).
std::string host_identity(const std::string& directory) {
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  struct stat shm {
  }, pids{}, network{};
  ::stat(directory.c_str(), &shm);
  ::stat("/proc/self/ns/pid", &pids);
  ::stat("/proc/self/ns/net", &network);
  return boot + " " + std::to_string(shm.st_dev) + ":" + std::to_string(shm.st_ino) + " " +
         std::to_string(pids.st_ino) + " " + std::to_string(network.st_ino);
}

std::string host_name() {
  char name[256] = "";
  ::gethostname(name, sizeof(name) - 1);
  return name;
}

// The `shm_bytes` option (HAL_SHM_BYTES sets it): bytes, or with a K, M or G
// suffix; at least 4096.
bool parse_area_bytes(const backend::BackendOption& option, std::uint64_t& bytes, std::string& error) {
  bytes = kDefaultAreaBytes;
  if (option.value.empty()) return true;
  const char* text = option.value.c_str();
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text, &end, 10);
  int shift = 0;
  if (end != text && *end != '\0' && end[1] == '\0') {
    const char suffix = static_cast<char>(*end | 0x20);
    shift = suffix == 'k' ? 10 : suffix == 'm' ? 20 : suffix == 'g' ? 30 : suffix == 't' ? 40 : -1;
    if (shift > 0) ++end;
  }
  if (end == text || *end != '\0' || errno != 0 || text[0] == '-' || shift < 0 ||
      value > (std::uint64_t{1} << (63 - shift)) / 64 || (value << shift) < kMinimumAreaBytes) {
    error = (option.source == "config" ? "config shm_bytes" : option.source) + "='" + option.value +
            "' is not a size of at least 4096 bytes; give bytes, optionally with K, M, G or T (e.g. 1M)";
    return false;
  }
  bytes = (static_cast<std::uint64_t>(value) << shift) & ~std::uint64_t{63};
  return true;
}

// Thrown inside an operation; execute() turns it into its status.
struct OperationFailure {
  hal_status status;
  std::string cause;
};

bool is_reduction(hal_collective_kind kind) {
  return kind == HAL_COLLECTIVE_ALL_REDUCE || kind == HAL_COLLECTIVE_REDUCE || kind == HAL_COLLECTIVE_REDUCE_SCATTER;
}
bool has_root(hal_collective_kind kind) { return kind == HAL_COLLECTIVE_BROADCAST || kind == HAL_COLLECTIVE_REDUCE; }

// The fields every rank of an operation must agree on.
void signature_of(const hal_collective_op_v1& op, std::uint64_t (&out)[4]) {
  out[0] = static_cast<std::uint64_t>(op.kind) << 32 | static_cast<std::uint64_t>(op.dtype) << 16 |
           (is_reduction(op.kind) ? static_cast<std::uint64_t>(op.reduce_op) : 0);
  out[1] = has_root(op.kind) ? static_cast<std::uint64_t>(op.root) : 0;
  out[2] = op.kind == HAL_COLLECTIVE_BARRIER ? 0 : op.count;
  out[3] = op.sequence;
}

std::string describe_signature(const std::uint64_t (&signature)[4]) {
  const auto kind = static_cast<hal_collective_kind>(signature[0] >> 32);
  std::string text = kind_name(kind) + " #" + std::to_string(signature[3]);
  if (kind == HAL_COLLECTIVE_BARRIER) return text;
  text +=
      " of " + std::to_string(signature[2]) + " x " + dtype_name(static_cast<hal_dtype>((signature[0] >> 16) & 0xffff));
  if (is_reduction(kind)) text += " " + abi::reduce_op_name(static_cast<hal_reduce_op>(signature[0] & 0xffff));
  if (has_root(kind)) text += " root " + std::to_string(signature[1]);
  return text;
}

void divide(hal_dtype type, void* values, std::size_t count, int divisor) {
  switch (type) {
    case HAL_DTYPE_F64: return divide_by(static_cast<double*>(values), count, divisor);
    case HAL_DTYPE_I8: return divide_by(static_cast<std::int8_t*>(values), count, divisor);
    case HAL_DTYPE_U8: return divide_by(static_cast<std::uint8_t*>(values), count, divisor);
    case HAL_DTYPE_I32: return divide_by(static_cast<std::int32_t*>(values), count, divisor);
    case HAL_DTYPE_I64: return divide_by(static_cast<std::int64_t*>(values), count, divisor);
    case HAL_DTYPE_F32:
    case HAL_DTYPE_F16:
    case HAL_DTYPE_BF16: break;
  }
  divide_by(static_cast<float*>(values), count, divisor);
}

// ---- the communicator ------------------------------------------------------

class ShmOperation;

class ShmCommunicator final : public CommunicatorEngine {
 public:
  ShmCommunicator(int rank, int world_size, std::shared_ptr<CommunicatorEngine> beside)
      : rank_(rank),
        world_(world_size),
        beside_(std::move(beside)),
        kernels_(shm_kernels()),
        sources_(static_cast<std::size_t>(world_size)) {}
  ~ShmCommunicator() override {
    for (const int fd : pidfds_)
      if (fd >= 0) ::close(fd);
    if (base_ != nullptr) ::munmap(base_, bytes_);
  }

  // Maps the segment of `bytes` bytes open as fd; "" or why not.
  std::string map(int fd, std::uint64_t bytes, std::uint64_t area_bytes, bool create);
  // After every rank mapped the segment: learns their pids.
  void watch_peers();

  hal_status execute(std::span<const HostOperation> operations, std::string& message) override;
  void abort() override { stop("aborted"); }
  void shut_down() override {
    stop("destroyed");
    { std::lock_guard wait_for_running(operation_mutex_); }
    beside_->shut_down();
  }
  std::pair<hal_status, std::string> first_error() override { return failure_.get(); }

  std::uint64_t area_bytes() const { return area_bytes_; }
  const ShmKernels& kernels() const { return kernels_; }

 private:
  friend class ShmOperation;

  RankLine& line(int rank) const { return reinterpret_cast<RankLine*>(header_ + 1)[rank]; }
  std::uint8_t* area(std::uint64_t parity, int rank) const {
    return reinterpret_cast<std::uint8_t*>(&line(world_)) +
           (parity * static_cast<std::uint64_t>(world_) + static_cast<std::uint64_t>(rank)) * area_bytes_;
  }
  void wake() {
    shared(header_->epoch).fetch_add(1);
    futex_wake(&header_->epoch);
  }
  // Fails what runs and what comes; `how`: "aborted" or "destroyed".
  void stop(const std::string& how);
  // Tells the other ranks this one failed, so that their waits end now.
  void publish_failure(const std::string& message) {
    std::int32_t expected = 0;
    if (shared(header_->broken).compare_exchange_strong(expected, rank_ + 1)) {
      const std::size_t length = std::min(message.size(), sizeof(header_->broken_message) - 1);
      std::memcpy(header_->broken_message, message.data(), length);
      header_->broken_message[length] = '\0';
      shared(header_->broken_ready).store(1);
    }
    wake();
  }

  int rank_, world_;
  std::shared_ptr<CommunicatorEngine> beside_;
  const ShmKernels& kernels_;
  std::uint8_t* base_ = nullptr;
  std::uint64_t bytes_ = 0;
  std::uint64_t area_bytes_ = 0;
  Header* header_ = nullptr;
  std::uint64_t arrivals_ = 0;  // this rank's count, as in its line
  bool spin_ = true;            // no more ranks than CPUs: waiting awake costs no peer its turn
  std::vector<int> pidfds_;     // -1: poll with kill() instead
  std::vector<std::int64_t> pids_;
  std::vector<const void*> sources_;

  std::mutex operation_mutex_;
  std::atomic<bool> aborted_{false};
  FirstFailure failure_;
};

std::string ShmCommunicator::map(int fd, std::uint64_t bytes, std::uint64_t area_bytes, bool create) {
  void* mapping = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (mapping == MAP_FAILED) return "mapping " + format_bytes(bytes) + " failed: " + std::strerror(errno);
  base_ = static_cast<std::uint8_t*>(mapping);
  bytes_ = bytes;
  area_bytes_ = area_bytes;
  header_ = reinterpret_cast<Header*>(base_);
  if (create) {
    header_->world_size = static_cast<std::uint64_t>(world_);
    header_->area_bytes = area_bytes;
    shared(header_->magic).store(kMagic);
  } else if (shared(header_->magic).load() != kMagic || header_->world_size != static_cast<std::uint64_t>(world_) ||
             header_->area_bytes != area_bytes) {
    return "the segment is not this communicator's (" + std::to_string(header_->world_size) + " ranks, areas of " +
           std::to_string(header_->area_bytes) + " bytes); is HAL_SHM_BYTES the same on every rank?";
  }
  shared(line(rank_).pid).store(static_cast<std::int64_t>(::getpid()));
  spin_ = world_ <= ::sysconf(_SC_NPROCESSORS_ONLN);
  return {};
}

void ShmCommunicator::watch_peers() {
  pids_.assign(static_cast<std::size_t>(world_), 0);
  pidfds_.assign(static_cast<std::size_t>(world_), -1);
  for (int peer = 0; peer < world_; ++peer) {
    if (peer == rank_) continue;
    pids_[peer] = shared(line(peer).pid).load();
#ifdef SYS_pidfd_open
    pidfds_[peer] = static_cast<int>(::syscall(SYS_pidfd_open, static_cast<pid_t>(pids_[peer]), 0));
#endif
  }
}

// One collective on the segment.
class ShmOperation {
 public:
  ShmOperation(ShmCommunicator& comm, const HostOperation& operation)
      : c_(comm),
        op_(operation.description),
        send_(operation.send),
        recv_(operation.recv),
        size_(element_size(op_.dtype)),
        deadline_(Clock::now() + Milliseconds(op_.timeout_ms)) {}

  void run() {
    switch (op_.kind) {
      case HAL_COLLECTIVE_ALL_REDUCE: return all_reduce(true);
      case HAL_COLLECTIVE_REDUCE: return all_reduce(c_.rank_ == op_.root);
      case HAL_COLLECTIVE_REDUCE_SCATTER: return reduce_scatter();
      case HAL_COLLECTIVE_ALL_GATHER: return all_gather();
      case HAL_COLLECTIVE_BROADCAST: return broadcast();
      case HAL_COLLECTIVE_BARRIER: return sync();
      default: break;
    }
  }

 private:
  std::uint8_t* own_area() const { return c_.area(c_.arrivals_ % 2, c_.rank_); }
  const std::uint8_t* area_of(int rank) const { return c_.area((c_.arrivals_ + 1) % 2, rank); }
  std::uint64_t elements_per_area() const { return c_.area_bytes_ / size_; }

  // Ends this phase: arrives, waits for every rank, and in the first phase
  // of the operation checks that every rank runs the same one.
  void sync() {
    const std::uint64_t phase = c_.arrivals_;
    RankLine& mine = c_.line(c_.rank_);
    if (first_phase_) signature_of(op_, mine.signature[phase % 2]);
    shared(mine.arrivals).store(phase + 1);
    c_.arrivals_ = phase + 1;
    if (shared(c_.header_->sleepers).load() != 0) c_.wake();
    wait_for_all(phase + 1);
    if (first_phase_) check_signatures(phase % 2);
    first_phase_ = false;
  }

  int lagging(std::uint64_t target) const {
    for (int peer = 0; peer < c_.world_; ++peer)
      if (peer != c_.rank_ && shared(c_.line(peer).arrivals).load() < target) return peer;
    return -1;
  }

  void wait_for_all(std::uint64_t target) {
    if (lagging(target) < 0) return;
    if (c_.spin_ && spin_until([&] { return lagging(target) < 0; }, kYield, kSpin)) return;
    Header& header = *c_.header_;
    auto next_liveness_check = Clock::now() + kLivenessPeriod;
    for (;;) {
      if (c_.aborted_.load()) throw OperationFailure{HAL_ERROR_ABORTED, "aborted while running"};
      if (const std::int32_t broken = shared(header.broken).load(); broken != 0 && broken != c_.rank_ + 1) {
        const std::string report = shared(header.broken_ready).load() != 0 ? header.broken_message : "";
        throw OperationFailure{HAL_ERROR_DEVICE_LOST, "rank " + std::to_string(broken - 1) + " failed" +
                                                          (report.empty() ? std::string() : ": " + report)};
      }
      shared(header.sleepers).fetch_add(1);
      const std::uint32_t seen = shared(header.epoch).load();
      int peer = lagging(target);
      const auto now = Clock::now();
      if (peer >= 0 && now < deadline_)
        futex_wait(&header.epoch, seen,
                   std::min<Milliseconds>(kSleep,
                                          std::chrono::duration_cast<Milliseconds>(deadline_ - now) + Milliseconds(1)));
      shared(header.sleepers).fetch_sub(1);
      peer = lagging(target);
      if (peer < 0) return;
      if (Clock::now() >= next_liveness_check || Clock::now() >= deadline_) {
        next_liveness_check = Clock::now() + kLivenessPeriod;
        check_alive(target);
      }
      if (Clock::now() >= deadline_) {
        std::string ranks;
        for (int other = 0; other < c_.world_; ++other)
          if (other != c_.rank_ && shared(c_.line(other).arrivals).load() < target)
            ranks += (ranks.empty() ? "rank " : ", rank ") + std::to_string(other);
        throw OperationFailure{HAL_ERROR_TIMEOUT, "timed out after " + std::to_string(op_.timeout_ms) +
                                                      " ms waiting for " + ranks +
                                                      " (stopped, hung, or in another operation)"};
      }
    }
  }

  // A rank that has not arrived and whose process has ended cannot arrive.
  void check_alive(std::uint64_t target) const {
    for (int peer = 0; peer < c_.world_; ++peer) {
      if (peer == c_.rank_ || shared(c_.line(peer).arrivals).load() >= target) continue;
      bool gone;
      if (c_.pidfds_[peer] >= 0) {
        pollfd exited{c_.pidfds_[peer], POLLIN, 0};
        gone = ::poll(&exited, 1, 0) > 0;
      } else {
        gone = ::kill(static_cast<pid_t>(c_.pids_[peer]), 0) != 0 && errno == ESRCH;
      }
      if (gone)
        throw OperationFailure{HAL_ERROR_DEVICE_LOST, "rank " + std::to_string(peer) + " (pid " +
                                                          std::to_string(c_.pids_[peer]) +
                                                          ") exited or was killed before it arrived"};
    }
  }

  void check_signatures(std::uint64_t parity) const {
    const auto& mine = c_.line(c_.rank_).signature[parity];
    bool same = true;
    for (int peer = 0; peer < c_.world_; ++peer) {
      const auto& theirs = c_.line(peer).signature[parity];
      same = same && std::equal(std::begin(mine), std::end(mine), std::begin(theirs));
    }
    if (same) return;
    std::string listing;
    for (int peer = 0; peer < c_.world_; ++peer)
      listing += "\n  rank " + std::to_string(peer) + ": " + describe_signature(c_.line(peer).signature[parity]);
    throw OperationFailure{HAL_ERROR_INVALID_ARGUMENT, "the ranks called different operations:" + listing};
  }

  // out = the reduction of `count` elements of sources[0..k); out may be
  // sources[0], never another. f16/bf16 accumulate in f32, rounded once.
  void reduce_into(void* out, std::size_t k, std::uint64_t count) {
    const auto& sources = c_.sources_;
    const auto& kernels = c_.kernels_;
    const hal_dtype type = op_.dtype;
    const bool average = op_.reduce_op == HAL_REDUCE_AVG;
    if (!is_half(type)) {
      if (k == 1 && out != sources[0]) std::memcpy(out, sources[0], count * size_);
      if (k > 1) kernels.combine(type, op_.reduce_op, out, sources[0], sources[1], count);
      for (std::size_t j = 2; j < k; ++j) kernels.combine(type, op_.reduce_op, out, out, sources[j], count);
      if (average) divide(type, out, count, c_.world_);
      return;
    }
    constexpr std::uint64_t kBlock = 1024;
    float accumulator[kBlock], incoming[kBlock];
    for (std::uint64_t done = 0; done < count; done += kBlock) {
      const std::uint64_t n = std::min(kBlock, count - done);
      kernels.widen(type, static_cast<const std::uint16_t*>(sources[0]) + done, accumulator, n);
      for (std::size_t j = 1; j < k; ++j) {
        kernels.widen(type, static_cast<const std::uint16_t*>(sources[j]) + done, incoming, n);
        kernels.combine(HAL_DTYPE_F32, op_.reduce_op, accumulator, accumulator, incoming, n);
      }
      if (average) divide_by(accumulator, n, c_.world_);
      kernels.narrow(type, accumulator, static_cast<std::uint16_t*>(out) + done, n);
    }
  }

  // Rank q's share of m elements: [begin(q), begin(q + 1)).
  std::uint64_t begin(int q, std::uint64_t m) const {
    return m * static_cast<std::uint64_t>(q) / static_cast<std::uint64_t>(c_.world_);
  }

  void all_reduce(bool deliver) {
    const std::uint64_t bytes = op_.count * size_;
    const int n = c_.world_, me = c_.rank_;
    if (bytes <= std::min(kOneShotBytes, c_.area_bytes_)) {
      std::memcpy(own_area(), send_, bytes);
      sync();
      if (!deliver) return;
      for (int q = 0; q < n; ++q) c_.sources_[q] = area_of(q);  // the same order on every rank
      return reduce_into(recv_, static_cast<std::size_t>(n), op_.count);
    }
    // Rounds of reduce-scatter (each rank reduces its share of the round
    // into its area) then all-gather (copied out in the next round's first
    // phase, or after the last).
    const auto gather = [&](std::uint64_t start, std::uint64_t m) {
      if (!deliver) return;
      for (int q = 0; q < n; ++q)
        if (q != me)
          std::memcpy(recv_ + (start + begin(q, m)) * size_, area_of(q), (begin(q + 1, m) - begin(q, m)) * size_);
    };
    const std::uint64_t per_round = elements_per_area();
    std::uint64_t previous_start = 0, previous_m = 0;
    for (std::uint64_t start = 0; start < op_.count; start += per_round) {
      const std::uint64_t m = std::min(per_round, op_.count - start);
      gather(previous_start, previous_m);
      for (int q = 0; q < n; ++q)
        if (q != me)
          std::memcpy(own_area() + begin(q, m) * size_, send_ + (start + begin(q, m)) * size_,
                      (begin(q + 1, m) - begin(q, m)) * size_);
      sync();
      const std::uint64_t first = begin(me, m), share = begin(me + 1, m) - first;
      c_.sources_[0] = send_ + (start + first) * size_;
      for (int q = 0, j = 1; q < n; ++q)
        if (q != me) c_.sources_[j++] = area_of(q) + first * size_;
      reduce_into(own_area(), static_cast<std::size_t>(n), share);
      if (deliver) std::memcpy(recv_ + (start + first) * size_, own_area(), share * size_);
      sync();
      previous_start = start;
      previous_m = m;
    }
    gather(previous_start, previous_m);
  }

  void reduce_scatter() {
    const int n = c_.world_, me = c_.rank_;
    const std::uint64_t count = op_.count, per_round = std::max<std::uint64_t>(elements_per_area() / n, 1);
    for (std::uint64_t start = 0; start < count; start += per_round) {
      const std::uint64_t m = std::min(per_round, count - start);
      for (int q = 0; q < n; ++q)
        if (q != me) std::memcpy(own_area() + q * m * size_, send_ + (q * count + start) * size_, m * size_);
      sync();
      c_.sources_[0] = send_ + (me * count + start) * size_;  // recv itself when in place
      for (int q = 0, j = 1; q < n; ++q)
        if (q != me) c_.sources_[j++] = area_of(q) + me * m * size_;
      reduce_into(recv_ + start * size_, static_cast<std::size_t>(n), m);
    }
  }

  void all_gather() {
    const int n = c_.world_, me = c_.rank_;
    const std::uint64_t count = op_.count, per_round = elements_per_area();
    std::uint8_t* own_block = recv_ + me * count * size_;
    if (send_ != own_block) std::memmove(own_block, send_, count * size_);
    for (std::uint64_t start = 0; start < count; start += per_round) {
      const std::uint64_t m = std::min(per_round, count - start);
      std::memcpy(own_area(), own_block + start * size_, m * size_);
      sync();
      for (int q = 0; q < n; ++q)
        if (q != me) std::memcpy(recv_ + (q * count + start) * size_, area_of(q), m * size_);
    }
  }

  void broadcast() {
    const bool root = c_.rank_ == op_.root;
    const std::uint64_t count = op_.count, per_round = elements_per_area();
    if (root && send_ != recv_) std::memcpy(recv_, send_, count * size_);
    for (std::uint64_t start = 0; start < count; start += per_round) {
      const std::uint64_t m = std::min(per_round, count - start);
      if (root) std::memcpy(own_area(), send_ + start * size_, m * size_);
      sync();
      if (!root) std::memcpy(recv_ + start * size_, area_of(op_.root), m * size_);
    }
  }

  ShmCommunicator& c_;
  const hal_collective_op_v1& op_;
  std::uint8_t* send_;
  std::uint8_t* recv_;
  std::uint64_t size_;
  Clock::time_point deadline_;
  bool first_phase_ = true;
};

bool runs_on_shm(hal_collective_kind kind) {
  switch (kind) {
    case HAL_COLLECTIVE_ALL_REDUCE:
    case HAL_COLLECTIVE_REDUCE:
    case HAL_COLLECTIVE_REDUCE_SCATTER:
    case HAL_COLLECTIVE_ALL_GATHER:
    case HAL_COLLECTIVE_BROADCAST:
    case HAL_COLLECTIVE_BARRIER: return true;
    default: return false;
  }
}

hal_status ShmCommunicator::execute(std::span<const HostOperation> operations, std::string& message) {
  const hal_collective_op_v1& first = operations.front().description;
  const auto what = [&] {
    std::string text = describe_operation(rank_, first);
    if (operations.size() > 1) text += " and " + std::to_string(operations.size() - 1) + " more in its group";
    return text;
  };
  std::lock_guard lock(operation_mutex_);
  if (const hal_status refused = failure_.refuse(aborted_.load(), what, message); refused != HAL_OK) return refused;
  if (operations.size() > 1 || !runs_on_shm(first.kind)) {
    const hal_status status = beside_->execute(operations, message);
    if (status != HAL_OK) failure_.record(status, message);
    return status;
  }
  if (first.count == 0 && first.kind != HAL_COLLECTIVE_BARRIER) return HAL_OK;
  try {
    ShmOperation(*this, operations.front()).run();
    return HAL_OK;
  } catch (const OperationFailure& failure) {
    message = what() + ": " + failure.cause + " [shm]";
    if (failure_.record(failure.status, message) && failure.status != HAL_ERROR_ABORTED) publish_failure(message);
    beside_->abort();  // broken as a whole: the other operations end too
    return failure.status;
  }
}

void ShmCommunicator::stop(const std::string& how) {
  if (aborted_.exchange(true)) return;
  const std::string message = "rank " + std::to_string(rank_) + ": the communicator was " + how;
  failure_.record(HAL_ERROR_ABORTED, message);
  if (header_ != nullptr) publish_failure(message);  // ends this rank's wait and the others'
  beside_->abort();
}

// ---- creation --------------------------------------------------------------------

// Store helpers for the rendezvous; both fail() on error.
hal_status publish(const hal_communicator_config_v1& config, const std::string& key, const std::string& value) {
  const hal_status status = store_set(*config.store, key, value);
  return status == HAL_OK ? HAL_OK
                          : fail(status, "rank " + std::to_string(config.rank) + ": publishing '" + key + "' failed");
}

hal_status read_key(const hal_communicator_config_v1& config, const std::string& key, int owner, std::string& value) {
  const hal_status status = store_get(*config.store, key, config.timeout_ms, value);
  if (status == HAL_ERROR_TIMEOUT)
    return fail(status, "rank " + std::to_string(config.rank) + ": rank " + std::to_string(owner) +
                            " did not set up the shared-memory segment within " + std::to_string(config.timeout_ms) +
                            " ms");
  if (status != HAL_OK) return fail(status, "rank " + std::to_string(config.rank) + ": reading '" + key + "' failed");
  return HAL_OK;
}

std::string random_digits() {
  unsigned char bytes[8] = {};
  if (::getrandom(bytes, sizeof(bytes), 0) != static_cast<ssize_t>(sizeof(bytes))) return {};
  static constexpr char digits[] = "0123456789abcdef";
  std::string text;
  for (const unsigned char byte : bytes) {
    text += digits[byte >> 4];
    text += digits[byte & 15];
  }
  return text;
}

// Rank 0: creates the segment file, reserving its pages so that a full
// directory is an error now rather than a SIGBUS later. Returns the open
// file or -1 with why set.
int create_segment(const std::string& directory, const std::string& name, std::uint64_t bytes,
                   const std::string& layout, std::string& why) {
  const std::string needs =
      "the shared-memory segment needs " + format_bytes(bytes) + " (" + layout + ") in " + directory;
  struct statvfs space {};
  if (::statvfs(directory.c_str(), &space) != 0) {
    why = needs + ", which cannot be used: " + std::strerror(errno);
    return -1;
  }
  const std::uint64_t free_bytes = static_cast<std::uint64_t>(space.f_bavail) * space.f_frsize;
  const std::string advice = "; free space there, set HAL_SHM_DIR to a larger tmpfs, or lower HAL_SHM_BYTES";
  if (free_bytes < bytes) {
    why = needs + ", which has " + format_bytes(free_bytes) + " free" + advice;
    return -1;
  }
  const std::string path = directory + "/" + name;
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    why = needs + "; creating " + path + " failed: " + std::strerror(errno);
    return -1;
  }
  if (const int error = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes)); error != 0) {
    why = needs + "; reserving it failed: " + std::strerror(error) + advice;
    ::close(fd);
    ::unlink(path.c_str());
    return -1;
  }
  return fd;
}

}  // namespace

hal_status create_shm_engine(hal_backend_context& context, const hal_communicator_config_v1& config, ShmUse use,
                             std::shared_ptr<CommunicatorEngine> beside, std::shared_ptr<CommunicatorEngine>& out,
                             std::string& not_used) {
  const int rank = config.rank, world = config.world_size;
  const std::string who = "rank " + std::to_string(rank);
  const std::string prefix = std::string(config.key_prefix != nullptr ? config.key_prefix : "hal") + "/shm/";
  const std::string directory = abi::shm_directory();

  // Every rank must see the same shared memory.
  const std::string here = host_name();
  if (hal_status status =
          publish(config, prefix + "host/" + std::to_string(rank), host_identity(directory) + "\n" + here);
      status != HAL_OK)
    return status;
  std::string first, first_host, elsewhere;
  for (int peer = 0; peer < world; ++peer) {
    std::string theirs;
    if (hal_status status = read_key(config, prefix + "host/" + std::to_string(peer), peer, theirs); status != HAL_OK)
      return status;
    const std::string identity = theirs.substr(0, theirs.find('\n')), host = theirs.substr(theirs.find('\n') + 1);
    if (peer == 0) std::tie(first, first_host) = std::pair(identity, host);
    if (identity != first && elsewhere.empty())
      elsewhere = "rank " + std::to_string(peer) + " (on " + host + ") does not share rank 0's (on " + first_host +
                  ") shared memory: another host, another HAL_SHM_DIR file system, or another pid or network "
                  "namespace";
  }
  if (!elsewhere.empty()) {
    if (use == ShmUse::required)
      return fail(HAL_ERROR_UNSUPPORTED, who + ": the shm engine needs every rank on one host: " + elsewhere +
                                             "; use HAL_COLL_ENGINE=auto, gloo or mpi");
    not_used = "the ranks are on more than one host: " + elsewhere;
    return succeed();
  }

  std::uint64_t area_bytes = 0;
  std::string error;
  if (!parse_area_bytes(context.shm_bytes, area_bytes, error))
    return fail(HAL_ERROR_INVALID_ARGUMENT, who + ": " + error);
  area_bytes = std::max<std::uint64_t>(area_bytes, static_cast<std::uint64_t>(world) * 64);
  const std::uint64_t lines = sizeof(Header) + sizeof(RankLine) * static_cast<std::uint64_t>(world);
  const std::uint64_t bytes = lines + 2 * static_cast<std::uint64_t>(world) * area_bytes;
  const std::string layout = std::to_string(world) + " ranks x 2 areas of " + format_bytes(area_bytes);

  auto comm = std::make_shared<ShmCommunicator>(rank, world, beside);
  int fd = -1;
  std::string path;
  bool own_failure = true;  // error is this rank's, not what it read from rank 0
  if (rank == 0) {
    const std::string digits = random_digits();
    const std::string name = abi::shm_job_prefix(option_value(config, "job_token")) + digits;
    path = directory + "/" + name;
    if (digits.empty())
      error = "drawing the segment's random name failed: " + std::string(std::strerror(errno));
    else
      fd = create_segment(directory, name, bytes, layout, error);
    if (fd >= 0) error = comm->map(fd, bytes, area_bytes, true);
    if (hal_status status = publish(config, prefix + "segment", error.empty() ? "ok " + name : "error " + error);
        status != HAL_OK) {
      if (fd >= 0) ::unlink(path.c_str());
      return status;
    }
  } else {
    std::string segment;
    if (hal_status status = read_key(config, prefix + "segment", 0, segment); status != HAL_OK) return status;
    if (segment.rfind("ok ", 0) == 0) {
      path = directory + "/" + segment.substr(3);
      fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
      struct stat file {};
      if (fd < 0)
        error = "opening " + path + " failed: " + std::strerror(errno);
      else if (::fstat(fd, &file) != 0 || static_cast<std::uint64_t>(file.st_size) != bytes)
        error = path + " holds " + std::to_string(file.st_size) + " bytes, not the " + std::to_string(bytes) + " of " +
                layout + "; is HAL_SHM_BYTES the same on every rank?";
      else
        error = comm->map(fd, bytes, area_bytes, false);
    } else {
      error = "rank 0: " + segment.substr(segment.find(' ') + 1);
      own_failure = false;
    }
  }
  if (fd >= 0) ::close(fd);  // the mapping stays
  if (!error.empty() && own_failure) {
    error = who + ": " + error;
    context.host.log_message(HAL_LOG_WARNING, error +
                                                  "; the shm engine is not used, the engine beside it runs "
                                                  "every operation");
  }

  // Everyone reports; the name goes once every rank has mapped it or failed.
  if (hal_status status = publish(config, prefix + "attached/" + std::to_string(rank), error.empty() ? "ok" : error);
      status != HAL_OK)
    return status;
  std::string first_error = error;
  for (int peer = 0; peer < world; ++peer) {
    std::string report;
    if (hal_status status = read_key(config, prefix + "attached/" + std::to_string(peer), peer, report);
        status != HAL_OK) {
      if (rank == 0 && fd >= 0) ::unlink(path.c_str());
      return status;
    }
    if (report != "ok" && first_error.empty()) first_error = report;
  }
  if (rank == 0 && !path.empty()) ::unlink(path.c_str());
  if (!first_error.empty()) {
    not_used = first_error;
    return succeed();
  }
  comm->watch_peers();
  comm->description = "all " + std::to_string(world) + " ranks share host " + here + "; segment of " +
                      format_bytes(bytes) + " (" + layout + ") in " + directory + ", " + comm->kernels().isa +
                      " reductions";
  out = std::move(comm);
  return succeed();
}

std::string shm_availability() {
  const std::string directory = abi::shm_directory();
  struct statvfs space {};
  if (::statvfs(directory.c_str(), &space) != 0) return "unavailable, " + directory + ": " + std::strerror(errno);
  return "available (" + directory + ", " + format_bytes(static_cast<std::uint64_t>(space.f_bavail) * space.f_frsize) +
         " free, " + shm_kernels().isa + " reductions)";
}

}  // namespace hal::host
