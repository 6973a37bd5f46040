#pragma once
// Memory in transparent huge pages, for data read at random (embedding
// tables, the item cache): with 4 KiB pages such reads miss the TLB on
// nearly every access once the forward has swept it, and in a VM each miss
// walks two page tables. With THP in "madvise" mode (Debian's default, and
// what the agent recommends) memory gets 2 MiB pages only if it asks before
// its first touch, which the heap never does. Where the kernel says no (THP
// "never"), this is plain memory: still correct.

#include <cstddef>
#include <memory>
#include <new>

namespace numaserve::numa {

inline constexpr std::size_t kHugePage = 2u << 20;

// `bytes` rounded up to whole huge pages, mapped at a 2 MiB boundary and
// asked for huge pages (MADV_HUGEPAGE), not yet touched: the first touch
// places each page, on the toucher's NUMA node. nullptr when mmap fails.
void* allocate_huge_pages(std::size_t bytes) noexcept;
// What allocate_huge_pages(bytes) gave.
void free_huge_pages(void* data, std::size_t bytes) noexcept;

// For std::vector: storage of a huge page or more from allocate_huge_pages,
// smaller storage from the heap.
template <class T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <class U>
  explicit HugePageAllocator(const HugePageAllocator<U>&) noexcept {}

  T* allocate(std::size_t n) {
    if (n * sizeof(T) < kHugePage) return std::allocator<T>{}.allocate(n);
    if (void* p = allocate_huge_pages(n * sizeof(T))) return static_cast<T*>(p);
    throw std::bad_alloc();
  }
  void deallocate(T* p, std::size_t n) noexcept {
    if (n * sizeof(T) < kHugePage) {
      std::allocator<T>{}.deallocate(p, n);
    } else {
      free_huge_pages(p, n * sizeof(T));
    }
  }
  friend bool operator==(const HugePageAllocator&, const HugePageAllocator&) { return true; }
};

}  // namespace numaserve::numa
