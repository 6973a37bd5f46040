#pragma once
// The fixture model's feature contract (tests/fixtures/features/model.yaml),
// read once: the shape every tensor decoder's accepted input is checked
// against.

#include <string>

#include "features/model_spec.h"
#include "numaserve/common/text_file.h"

namespace numaserve::fuzz {

inline const features::ModelSpec& fixture_spec() {
  static const features::ModelSpec model = [] {
    const std::string file = std::string(NUMASERVE_FIXTURES_DIR) + "/features/model.yaml";
    return features::parse_model_spec(*read_text_file(file), file).value();
  }();
  return model;
}

}  // namespace numaserve::fuzz
