#pragma once
// A model repository as --model-repository lays it out, read as it is now:
//   DIR/<model>/config.yaml        the version policy and labels (optional)
//   DIR/<model>/<version>/model.pt, model.yaml
// versions being positive integers (Triton's and TF Serving's layout). Pure
// reading: which versions exist, which are complete, which the policy wants.
// What to do about them is lifecycle/'s.
//
// A version directory counts only when complete. When the repository is
// read decides what that takes (ReadAt):
//   - at start-up, and for a model a load call names, what is there is
//     complete: the tool that put it there is done (Triton's and TF
//     Serving's rule; a load call is itself the signal). A half-written one
//     fails to load with its reason, and is tried again once its files
//     change;
//   - while polling, a tool may still be copying it, so one of these makes
//     it complete (docs/operate.md):
//     1. its marker file, kMarker, exists (a tool writing in place writes
//        it last);
//     2. it appeared by a rename (written elsewhere on the same filesystem,
//        then moved into place, alone or inside its model's directory) and
//        the watcher saw the move (lifecycle/watcher.h);
//     3. it lives in a Kubernetes atomic-writer volume (configMap, secret,
//        projected, downwardAPI; git-sync works the same way): its real path
//        goes through a "..<timestamp>" directory, which the kubelet swaps
//        in through the `..data` symlink only when every file is written.
//   Never a guess from timestamps: a directory's change time passed a small
//   copy in place for a rename and refused a large one, by the kernel's tick.
// A file changing under a version already served changes nothing: the
// repository is read for versions not served yet.

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "numaserve/common/result.h"

namespace numaserve::repository {

// The file a tool writing a version in place creates last.
inline constexpr const char* kMarker = "COMPLETE";
// A model's policy file, beside its version directories.
inline constexpr const char* kPolicyFile = "config.yaml";

// Which of a model's complete versions to serve (TF Serving's and Triton's
// version policies), and the labels that name some of them.
struct Policy {
  enum class Kind { kLatest, kSpecific, kAll };
  Kind kind = Kind::kLatest;
  std::size_t latest = 1;              // kLatest: the N highest
  std::vector<std::string> specific;   // kSpecific
  std::map<std::string, std::string> labels;  // "stable" -> "3"
  bool operator==(const Policy&) const = default;
};

// `text` as read from `file` (config.yaml):
//   version_policy: {latest: 2} | {specific: [1, 3]} | all
//   labels: {stable: 3, canary: 4}
// Errors name the file and line.
Result<Policy> parse_policy(const std::string& text, const std::string& file);

struct VersionDir {
  std::string number;          // the directory's name: a positive integer
  std::filesystem::path dir;
  bool complete = false;
  std::string why;             // how it counts complete, or why not yet
  // Changes whenever the directory's files do: a version that failed to
  // load is tried again only once its files changed.
  std::string fingerprint;
};

struct ModelDir {
  std::string name;
  std::filesystem::path dir;
  Result<Policy> policy = Policy{};
  std::vector<VersionDir> versions;  // every version directory, lowest first
};

// When the repository is read (the header's rules).
enum class ReadAt { kStartUp, kLoadCall, kPolling };

// Every model directory under `root`, hidden entries (".*", the kubelet's
// "..data") left out. `renamed`: version directories a watcher saw moved
// into place. An error only when `root` itself cannot be read.
Result<std::vector<ModelDir>> scan(const std::filesystem::path& root, ReadAt at,
                                const std::set<std::filesystem::path>& renamed = {});

// One model's directory only: what a load call names.
Result<ModelDir> scan_model(const std::filesystem::path& root, const std::string& name, ReadAt at,
                         const std::set<std::filesystem::path>& renamed = {});

// The complete versions the policy wants, lowest first.
std::vector<std::string> wanted(const Policy& policy, const std::vector<VersionDir>& versions);

// A model's name as requests and the repository routes give it: one path
// segment, no "/", not "." or "..", not hidden. Nothing outside the
// repository can be named.
Status check_model_name(std::string_view name);

// A positive integer without leading zeros: "1", "20"; not "0", "01", "v1".
bool is_version_number(std::string_view name);

}  // namespace numaserve::repository
