#include "numa/huge_pages.h"

#include <sys/mman.h>

#include <cstdint>

namespace numaserve::numa {
namespace {

std::size_t whole_pages(std::size_t bytes) { return (bytes + kHugePage - 1) / kHugePage * kHugePage; }

}  // namespace

void* allocate_huge_pages(std::size_t bytes) noexcept {
  const std::size_t size = whole_pages(bytes);
  // mmap promises 4 KiB alignment only: map a huge page more and unmap the
  // ends, so that every page of the result can be a huge one.
  void* base = mmap(nullptr, size + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<std::uintptr_t>(base);
  const std::uintptr_t aligned = (start + kHugePage - 1) & ~(kHugePage - 1);
  if (aligned > start) munmap(base, aligned - start);
  if (const std::uintptr_t tail = start + kHugePage - aligned; tail > 0) {
    munmap(reinterpret_cast<void*>(aligned + size), tail);
  }
  auto* data = reinterpret_cast<void*>(aligned);
  madvise(data, size, MADV_HUGEPAGE);  // an error (THP "never") leaves 4 KiB pages
  return data;
}

void free_huge_pages(void* data, std::size_t bytes) noexcept { munmap(data, whole_pages(bytes)); }

}  // namespace numaserve::numa
