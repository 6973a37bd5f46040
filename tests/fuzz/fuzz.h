#pragma once
// What every harness shares: the entry point's signature, the input as
// text, and a property check that stops the run with a message — libFuzzer
// keeps the input as a finding, the replay test fails on it.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

#define FUZZ_CHECK(condition, ...)                                        \
  do {                                                                    \
    if (!(condition)) {                                                   \
      std::fprintf(stderr, "property broken: %s\n  ", #condition);        \
      std::fprintf(stderr, __VA_ARGS__);                                  \
      std::fputc('\n', stderr);                                           \
      std::abort();                                                       \
    }                                                                     \
  } while (0)

namespace numaserve::fuzz {

inline std::string_view text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace numaserve::fuzz
