// KServe v2 infer bodies on a model with every kind of input: never a
// crash; a refusal names its field; and what is accepted is exactly what
// the model's forward takes — no wrong tensor ever reaches LibTorch: the
// dense rows are rows x the numeric features, one embedding bag per id
// feature with one offset per row, starting at 0, never falling, never past
// its indices, and every index inside its table. Bodies with binary tensor
// data (Triton's extension) as well as JSON ones.
#include <optional>

#include "codec/v2_json.h"
#include "fixture_spec.h"
#include "fuzz.h"

using namespace numaserve;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto& model = fuzz::fixture_spec();
  api::RequestLimits limits;
  limits.max_items = 64;
  // An input starting 'B' is a binary tensor data body: its second byte
  // the JSON's length (Inference-Header-Content-Length), the rest the body.
  std::optional<std::size_t> json_length;
  if (size >= 2 && data[0] == 'B') {
    json_length = data[1];
    data += 2;
    size -= 2;
  }
  const auto parsed = codec::parse_infer_request(fuzz::text(data, size), json_length, model, limits);
  if (!parsed) {
    FUZZ_CHECK(!parsed.error().field.empty(), "refused without a field: %s", parsed.error().message.c_str());
    return 0;
  }
  const auto& b = parsed->batch;
  const auto dense = model.dense_features();
  const auto sparse = model.sparse_features();
  FUZZ_CHECK(b.rows >= 1 && b.rows <= limits.max_items, "%zu rows", b.rows);
  FUZZ_CHECK(b.dense_width == dense.size() && b.dense.size() == b.rows * b.dense_width, "dense %zu x %zu, %zu values",
             b.rows, b.dense_width, b.dense.size());
  FUZZ_CHECK(b.bags.size() == sparse.size(), "%zu bags for %zu id features", b.bags.size(), sparse.size());
  for (std::size_t k = 0; k < b.bags.size(); ++k) {
    const auto& bag = b.bags[k];
    const std::uint64_t rows = model.tables.at(sparse[k]->table);
    FUZZ_CHECK(bag.offsets.size() == b.rows && bag.offsets[0] == 0, "bag %zu: %zu offsets", k, bag.offsets.size());
    for (std::size_t r = 1; r < bag.offsets.size(); ++r) {
      FUZZ_CHECK(bag.offsets[r] >= bag.offsets[r - 1], "bag %zu: offsets fall at row %zu", k, r);
    }
    FUZZ_CHECK(static_cast<std::size_t>(bag.offsets.back()) <= bag.indices.size(), "bag %zu: offsets past indices", k);
    for (const auto index : bag.indices) {
      FUZZ_CHECK(index >= 0 && static_cast<std::uint64_t>(index) < rows, "bag %zu: index %lld outside %llu rows", k,
                 static_cast<long long>(index), static_cast<unsigned long long>(rows));
    }
  }
  return 0;
}
