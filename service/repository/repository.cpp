#include "repository/repository.h"

#include <sys/stat.h>

#include <algorithm>
#include <system_error>

#include "numaserve/common/text_file.h"
#include "numaserve/common/yaml_file.h"

namespace numaserve::repository {
namespace fs = std::filesystem;
namespace {

Error invalid(const std::string& where, const std::string& what, const std::string& field) {
  return Error{Error::Code::kInvalidArgument, where + ": " + what, field};
}

// A version number as the policy file writes it: 3 or "3".
Result<std::string> version_value(const std::string& file, const YamlNode& node, const std::string& field) {
  const auto text = node.text();
  if (!text || !is_version_number(*text)) {
    return tl::unexpected(invalid(yaml_location(file, node), field + " must be a positive integer version", field));
  }
  return *text;
}

Result<Policy> parse_version_policy(const std::string& file, const YamlNode& node, Policy policy) {
  if (node.is_scalar() && node.text() == "all") {
    policy.kind = Policy::Kind::kAll;
    return policy;
  }
  if (!node.is_map() || node.size() != 1) {
    return tl::unexpected(invalid(yaml_location(file, node),
                                  "version_policy must be one of {latest: N}, {specific: [versions]}, all",
                                  "version_policy"));
  }
  const auto [key, value] = node.entries().front();
  const auto kind = yaml_key(file, key);
  if (!kind) return tl::unexpected(kind.error());
  if (*kind == "all") {
    policy.kind = Policy::Kind::kAll;
  } else if (*kind == "latest") {
    const auto n = value.whole_number();
    if (!n || *n == 0) {
      return tl::unexpected(invalid(yaml_location(file, value), "version_policy.latest must be a positive integer",
                                    "version_policy.latest"));
    }
    policy.kind = Policy::Kind::kLatest;
    policy.latest = *n;
  } else if (*kind == "specific") {
    if (!value.is_sequence() || value.size() == 0) {
      return tl::unexpected(invalid(yaml_location(file, value), "version_policy.specific must be a list of versions",
                                    "version_policy.specific"));
    }
    policy.kind = Policy::Kind::kSpecific;
    for (const auto& item : value.items()) {
      auto v = version_value(file, item, "version_policy.specific");
      if (!v) return tl::unexpected(v.error());
      policy.specific.push_back(*v);
    }
  } else {
    return tl::unexpected(invalid(yaml_location(file, key), "unknown version_policy '" + *kind + "' (latest, specific, all)",
                                  "version_policy"));
  }
  return policy;
}

// The last modification and, for a directory, its last change (ns).
struct Times {
  std::int64_t change = 0, modify = 0;
};

std::optional<Times> times_of(const fs::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return std::nullopt;
  return Times{st.st_ctim.tv_sec * 1'000'000'000LL + st.st_ctim.tv_nsec,
               st.st_mtim.tv_sec * 1'000'000'000LL + st.st_mtim.tv_nsec};
}

// Kubernetes' atomic writer keeps each generation in "..<timestamp>/" and
// points "..data" at the complete one.
bool in_atomic_writer_volume(const fs::path& dir) {
  std::error_code ec;
  const fs::path real = fs::canonical(dir, ec);
  if (ec) return false;
  for (const auto& part : real) {
    const std::string s = part.string();
    if (s.size() > 2 && s.starts_with("..")) return true;
  }
  return false;
}

// Whether `dir` is complete by the header's rules, why, and its fingerprint.
void judge(VersionDir& v, const std::set<fs::path>& renamed, ReadAt at) {
  std::error_code ec;
  bool has_pt = false, has_yaml = false, has_marker = false;
  std::string fingerprint;
  for (auto it = fs::recursive_directory_iterator(v.dir, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const auto t = times_of(it->path());
    if (!t) continue;  // removed meanwhile
    const auto rel = fs::relative(it->path(), v.dir, ec).string();
    const auto size = it->is_regular_file(ec) ? it->file_size(ec) : 0;
    fingerprint += rel + ":" + std::to_string(size) + ":" + std::to_string(t->modify) + ";";
    has_pt |= rel == "model.pt";
    has_yaml |= rel == "model.yaml";
    has_marker |= rel == kMarker;
  }
  const auto self = times_of(v.dir);
  v.fingerprint = fingerprint + (self ? std::to_string(self->change) : "");
  if (!has_pt || !has_yaml) {
    v.why = std::string("no ") + (has_pt ? "model.yaml" : "model.pt") + " yet";
    return;
  }
  v.complete = true;
  if (has_marker) {
    v.why = std::string("marker ") + kMarker;
  } else if (renamed.contains(v.dir)) {
    v.why = "moved into place";
  } else if (in_atomic_writer_volume(v.dir)) {
    v.why = "in a Kubernetes atomic-writer volume (..data)";
  } else if (at == ReadAt::kStartUp) {
    v.why = "present at start-up";
  } else if (at == ReadAt::kLoadCall) {
    v.why = "named by a load call";
  } else {
    v.complete = false;
    v.why = std::string("being written in place (or moved in unseen): waiting for the marker ") + kMarker;
  }
}

bool hidden(const fs::path& p) { return p.filename().string().starts_with("."); }

ModelDir read_model(const fs::path& dir, const std::string& name, const std::set<fs::path>& renamed, ReadAt at) {
  ModelDir model{name, dir, Policy{}, {}};
  const fs::path policy_file = dir / kPolicyFile;
  std::error_code ec;
  if (fs::exists(policy_file, ec)) {
    auto text = read_text_file(policy_file);
    model.policy = text ? parse_policy(*text, policy_file.string()) : Result<Policy>(tl::unexpected(text.error()));
  }
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string number = it->path().filename().string();
    if (!is_version_number(number) || !it->is_directory(ec)) continue;
    VersionDir v{number, dir / number, false, {}, {}};
    judge(v, renamed, at);
    model.versions.push_back(std::move(v));
  }
  std::sort(model.versions.begin(), model.versions.end(),
            [](const VersionDir& a, const VersionDir& b) { return std::stoull(a.number) < std::stoull(b.number); });
  return model;
}

}  // namespace

Result<Policy> parse_policy(const std::string& text, const std::string& file) {
  auto root = parse_yaml(text, file);
  if (!root) return tl::unexpected(root.error());
  Policy policy;
  if (root->is_null()) return policy;
  if (!root->is_map()) return tl::unexpected(invalid(yaml_location(file, *root), "must be a mapping", "config"));
  for (const auto& [key, value] : root->entries()) {
    auto name = yaml_key(file, key);
    if (!name) return tl::unexpected(name.error());
    if (*name == "version_policy") {
      auto parsed = parse_version_policy(file, value, policy);
      if (!parsed) return parsed;
      policy = std::move(*parsed);
    } else if (*name == "labels") {
      if (!value.is_map()) return tl::unexpected(invalid(yaml_location(file, value), "labels must be a mapping", "labels"));
      for (const auto& [label, version] : value.entries()) {
        auto l = yaml_key(file, label);
        if (!l) return tl::unexpected(l.error());
        if (l->empty() || is_version_number(*l)) {
          return tl::unexpected(invalid(yaml_location(file, label), "a label must be a name, not a version", "labels"));
        }
        auto v = version_value(file, version, "labels." + *l);
        if (!v) return tl::unexpected(v.error());
        policy.labels[*l] = *v;
      }
    } else {
      return tl::unexpected(invalid(yaml_location(file, key), "unknown key '" + *name + "' (version_policy, labels)", *name));
    }
  }
  return policy;
}

Result<std::vector<ModelDir>> scan(const fs::path& root, ReadAt at, const std::set<fs::path>& renamed) {
  std::error_code ec;
  std::vector<ModelDir> models;
  auto it = fs::directory_iterator(root, ec);
  if (ec) return make_error(Error::Code::kNotFound, root.string() + ": cannot read the model repository: " + ec.message(), "model_repository");
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    if (hidden(it->path()) || !it->is_directory(ec)) continue;
    models.push_back(read_model(it->path(), it->path().filename().string(), renamed, at));
  }
  std::sort(models.begin(), models.end(), [](const ModelDir& a, const ModelDir& b) { return a.name < b.name; });
  return models;
}

Result<ModelDir> scan_model(const fs::path& root, const std::string& name, ReadAt at, const std::set<fs::path>& renamed) {
  if (auto ok = check_model_name(name); !ok) return tl::unexpected(ok.error());
  std::error_code ec;
  if (!fs::is_directory(root / name, ec)) {
    return make_error(Error::Code::kNotFound, "no model '" + name + "' in the repository", "name");
  }
  return read_model(root / name, name, renamed, at);
}

std::vector<std::string> wanted(const Policy& policy, const std::vector<VersionDir>& versions) {
  std::vector<std::string> out;
  for (const auto& v : versions) {
    if (!v.complete) continue;
    const bool named = std::find(policy.specific.begin(), policy.specific.end(), v.number) != policy.specific.end();
    if (policy.kind != Policy::Kind::kSpecific || named) out.push_back(v.number);
  }
  if (policy.kind == Policy::Kind::kLatest && out.size() > policy.latest) out.erase(out.begin(), out.end() - policy.latest);
  return out;
}

Status check_model_name(std::string_view name) {
  if (name.empty() || name.find('/') != std::string_view::npos || name.find('\0') != std::string_view::npos ||
      name.starts_with(".")) {
    return make_error(Error::Code::kInvalidArgument,
                      "model name '" + std::string(name) + "' is not a model of the repository (one name: no '/', not hidden, not '..')",
                      "name");
  }
  return {};
}

bool is_version_number(std::string_view name) {
  return !name.empty() && name.size() < 19 && name.front() != '0' &&
         std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace numaserve::repository
