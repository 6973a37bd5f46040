#pragma once
// `numaserve extract`: the tensors /predict would feed a model, for requests
// read one JSON body per line, through the service's own code path — the
// body's parse, the embedded store's fetch with the model's item cache,
// extraction — so a second implementation of the feature contract (the
// training side's, python/) can be proven equal to it, bit for bit, and
// refusals with it, field for field. Torch-free: only model.yaml is read.

#include <filesystem>
#include <iosfwd>
#include <string>
#include <vector>

#include "features/extract.h"

#include "numaserve/common/options.h"
#include "numaserve/common/result.h"

namespace numaserve::commands {

struct ExtractConfig {
  std::string model_dir;      // its model.yaml
  std::string feature_store;  // a JSON Lines store; empty: inline features and defaults only
};

std::vector<OptionSpec> extract_options(ExtractConfig& c);

// Writes one JSON object per line of `in`, in order: what extraction made,
//   {"rows": N, "dense_width": D, "dense": [N*D float32, row-major],
//    "bags": [{"indices": [...], "offsets": [...]}, ...]}  (model.yaml's sparse order)
// or the body /predict would have refused the request with, and its status,
//   {"status": 400, "error": "...", "field": "..."}.
// Floats are written so that each reads back as the same float32. An error
// is a model directory or store that does not load (naming the file).
Status run_extract(const ExtractConfig& config, std::istream& in, std::ostream& out);

// The rows /predict would score for each line of the file `requests`
// (check-model's drift on real requests). A line /predict would refuse is
// an error naming the file and line.
Result<std::vector<features::Batch>> extract_requests(const ExtractConfig& config, const std::filesystem::path& requests);

// A labels file: one JSON array of 0 and 1 per line, a label per item of
// the request on the same line of the requests file.
Result<std::vector<std::vector<float>>> read_labels(const std::filesystem::path& file);

}  // namespace numaserve::commands
