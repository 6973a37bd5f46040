#pragma once
// A Model without LibTorch for the service's unit tests: the real router,
// batcher, store and reload manager around it. Scores each row by what
// extraction gave it, so a wrong row, order or batch shows in the scores.

#include <string>
#include <vector>

#include "api/model.h"
#include "features/model_spec.h"
#include "fixture_paths.h"
#include "numaserve/common/text_file.h"

namespace numaserve::api {

// tests/fixtures/features/model.yaml, the spec the fake models serve.
inline features::ModelSpec fixture_spec() {
  const auto file = testing::fixtures_dir() / "features/model.yaml";
  return features::parse_model_spec(read_text_file(file).value(), file.string()).value();
}

// The score: the sum of the row's dense values and its ids (mod 97).
class FakeModel final : public Model {
 public:
  explicit FakeModel(features::ModelSpec spec) : spec_(std::move(spec)) {}
  const features::ModelSpec& spec() const override { return spec_; }
  Result<std::vector<float>> forward(const features::Batch& batch) const override {
    ++forwards;
    if (fail) return make_error(Error::Code::kInternal, "forward failed: fake");
    auto out = scores(batch);
    for (auto& score : out) score += offset;
    return out;
  }
  Status warm_up(std::size_t, unsigned) const override { return {}; }
  std::vector<numa::MemoryRange> weights() const override { return {}; }
  std::size_t weight_bytes() const override { return 0; }
  GraphReport graph_report() const override { return {}; }
  PrecisionReport precision() const override { return {}; }

  static std::vector<float> scores(const features::Batch& batch) {
    std::vector<float> out(batch.rows, 0.f);
    for (std::size_t r = 0; r < batch.rows; ++r) {
      for (std::size_t c = 0; c < batch.dense_width; ++c) out[r] += batch.dense[r * batch.dense_width + c];
      for (const auto& bag : batch.bags) {
        const auto end = r + 1 < batch.rows ? bag.offsets[r + 1] : static_cast<std::int64_t>(bag.indices.size());
        for (auto i = bag.offsets[r]; i < end; ++i) out[r] += static_cast<float>(bag.indices[static_cast<std::size_t>(i)] % 97);
      }
    }
    return out;
  }

  mutable std::size_t forwards = 0;
  bool fail = false;
  float offset = 0;  // added to every score: tells versions apart

 private:
  features::ModelSpec spec_;
};

}  // namespace numaserve::api
