// A stream's unit of work: a callable type-erased with room for its
// captures inline, so that enqueueing a copy, a fill, an event record or a
// collective allocates nothing (std::function keeps only two pointers'
// worth inline). Larger callables live on the heap.
#pragma once

#include <cstddef>
#include <new>
#include <string>
#include <type_traits>
#include <utility>

#include "hal/backend_abi.h"

namespace hal::host {

class Task {
 public:
  // Room for a collective: its engine and one resolved operation.
  static constexpr std::size_t inline_size = 192;

  Task() = default;
  template <typename Callable>
    requires(!std::is_same_v<std::decay_t<Callable>, Task> &&
             std::is_invocable_r_v<hal_status, std::decay_t<Callable>&, hal_status, std::string&>)
  Task(Callable&& callable) {  // NOLINT(google-explicit-constructor): operations are built from lambdas
    using Stored = std::decay_t<Callable>;
    if constexpr (fits_inline<Stored>()) {
      ::new (static_cast<void*>(storage_)) Stored(std::forward<Callable>(callable));
      handlers_ = &inline_handlers<Stored>;
    } else {
      ::new (static_cast<void*>(storage_)) Stored*(new Stored(std::forward<Callable>(callable)));
      handlers_ = &heap_handlers<Stored>;
    }
  }
  Task(Task&& other) noexcept { take(other); }
  Task& operator=(Task&& other) noexcept {
    if (this != &other) {
      reset();
      take(other);
    }
    return *this;
  }
  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;
  ~Task() { reset(); }

  hal_status operator()(hal_status stream_status, std::string& message) {
    return handlers_->invoke(storage_, stream_status, message);
  }
  explicit operator bool() const { return handlers_ != nullptr; }
  // Destroys the callable and what it captured.
  void reset() {
    if (handlers_ != nullptr) handlers_->destroy(storage_);
    handlers_ = nullptr;
  }

 private:
  struct Handlers {
    hal_status (*invoke)(void* storage, hal_status stream_status, std::string& message);
    void (*relocate)(void* from, void* to);  // move-constructs at to, destroys at from
    void (*destroy)(void* storage);
  };

  template <typename Stored>
  static constexpr bool fits_inline() {
    return sizeof(Stored) <= inline_size && alignof(Stored) <= alignof(std::max_align_t) &&
           std::is_nothrow_move_constructible_v<Stored>;
  }

  template <typename Stored>
  static constexpr Handlers inline_handlers{
      [](void* storage, hal_status stream_status, std::string& message) -> hal_status {
        return (*std::launder(static_cast<Stored*>(storage)))(stream_status, message);
      },
      [](void* from, void* to) {
        Stored* source = std::launder(static_cast<Stored*>(from));
        ::new (to) Stored(std::move(*source));
        source->~Stored();
      },
      [](void* storage) { std::launder(static_cast<Stored*>(storage))->~Stored(); }};

  template <typename Stored>
  static constexpr Handlers heap_handlers{
      [](void* storage, hal_status stream_status, std::string& message) -> hal_status {
        return (**std::launder(static_cast<Stored**>(storage)))(stream_status, message);
      },
      [](void* from, void* to) { ::new (to) Stored*(*std::launder(static_cast<Stored**>(from))); },
      [](void* storage) { delete *std::launder(static_cast<Stored**>(storage)); }};

  void take(Task& other) noexcept {
    if (other.handlers_ == nullptr) return;
    other.handlers_->relocate(other.storage_, storage_);
    handlers_ = std::exchange(other.handlers_, nullptr);
  }

  alignas(std::max_align_t) unsigned char storage_[inline_size];
  const Handlers* handlers_ = nullptr;
};

}  // namespace hal::host
