#pragma once
// A list that grows while other threads read it, with no lock and no atomic
// read-modify-write on the read side: the per-model state of the hot path
// (a model's item caches, its stage histograms), which a model added after
// start extends while the workers serve the others. A fixed number of
// slots, each set once; an element never moves and lives as long as the
// list. A reader may use index i once i < size() (or once it learnt i from
// something published after push returned, such as the model table).

#include <array>
#include <atomic>
#include <cstddef>
#include <memory>
#include <optional>

namespace numaserve {

template <typename T, std::size_t Capacity>
class AppendOnly {
 public:
  // Callers serialize their pushes. The new index, or nullopt when full.
  std::optional<std::size_t> push(std::unique_ptr<T> value) {
    const std::size_t n = size_.load(std::memory_order_relaxed);
    if (n == Capacity) return std::nullopt;
    slots_[n] = std::move(value);
    size_.store(n + 1, std::memory_order_release);
    return n;
  }
  std::size_t size() const { return size_.load(std::memory_order_acquire); }
  T& operator[](std::size_t i) const { return *slots_[i]; }
  static constexpr std::size_t capacity() { return Capacity; }

 private:
  std::array<std::unique_ptr<T>, Capacity> slots_{};
  std::atomic<std::size_t> size_{0};
};

}  // namespace numaserve
