#pragma once
// Synthetic rows in the shapes a model's features make, for a load's checks
// and warm-up: torch-free, beside the LibTorch files.

#include <cstddef>
#include <cstdint>

#include "features/extract.h"
#include "features/model_spec.h"
#include "numaserve/common/result.h"

namespace numaserve::model {

// Random rows in the shapes `spec` makes: dense values around zero, and
// bags anywhere in their tables that are in turn empty, of one id, of
// max_len ids (100 if it has none; an id's bag is at most 1) and of any
// length in between. Seeded.
features::Batch random_rows(const features::ModelSpec& spec, std::size_t rows, std::uint64_t seed);

// `rows` rows at every feature's declared default: the shapes a request
// makes, without one.
Result<features::Batch> default_rows(const features::ModelSpec& spec, std::size_t rows);

}  // namespace numaserve::model
