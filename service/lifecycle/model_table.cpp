#include "lifecycle/model_table.h"

#include <algorithm>
#include <mutex>

namespace numaserve::lifecycle {

bool version_less(const std::string& a, const std::string& b) {
  auto number = [](const std::string& s) {
    return !s.empty() && s.size() < 19 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (number(a) && number(b)) return std::stoull(a) < std::stoull(b);
  return a < b;
}

ModelTable::ModelTable(std::vector<std::string> names) : names_(std::move(names)) {
  for (const auto& name : names_) entries_[name];
}

std::vector<std::string> ModelTable::names() const {
  std::shared_lock lock(mutex_);
  return names_;
}

void ModelTable::add_name(const std::string& name) {
  std::unique_lock lock(mutex_);
  if (std::find(names_.begin(), names_.end(), name) != names_.end()) return;
  names_.push_back(name);
  entries_[name];
  unloaded_.insert(name);
}

const ModelTable::Entry* ModelTable::entry(const std::string& name) const {
  const auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &it->second;
}

HeldVersion ModelTable::default_of(const Entry& e) const {
  if (const auto stable = e.labels.find("stable"); stable != e.labels.end()) {
    if (const auto it = e.versions.find(stable->second); it != e.versions.end()) return it->second;
  }
  HeldVersion latest;
  for (const auto& [version, held] : e.versions) {
    if (!latest || version_less(latest->version, version)) latest = held;
  }
  return latest;
}

Result<HeldVersion> ModelTable::resolve(const std::optional<std::string>& name, const std::string& version) const {
  std::shared_lock lock(mutex_);
  const std::string& wanted = name ? *name : names_.front();
  const Entry* e = entry(wanted);
  if (e == nullptr) return make_error(Error::Code::kNotFound, "model '" + wanted + "' is not served here", "model");
  if (version.empty()) {
    if (auto held = default_of(*e)) return held;
    return make_error(Error::Code::kNotFound, "model " + wanted + " has no version ready", "version");
  }
  if (const auto it = e->versions.find(version); it != e->versions.end()) return it->second;
  if (const auto label = e->labels.find(version); label != e->labels.end()) {
    if (const auto it = e->versions.find(label->second); it != e->versions.end()) return it->second;
  }
  std::string ready;
  for (const auto& [v, held] : e->versions) ready += (ready.empty() ? "" : ", ") + v;
  return make_error(Error::Code::kNotFound,
                    "model " + wanted + " has no version or label '" + version + "' ready (ready: " +
                        (ready.empty() ? "none" : ready) + ")",
                    "version");
}

Result<std::shared_ptr<ServedVersion>> ModelTable::prepare(std::unique_ptr<api::Model> model) const {
  const features::ModelSpec& spec = model->spec();
  std::shared_lock lock(mutex_);
  const auto at = std::find(names_.begin(), names_.end(), spec.name);
  if (at == names_.end()) {
    return make_error(Error::Code::kInvalidArgument,
                      "model " + spec.name + " is not one this service serves (Service::add_model adds it)",
                      "model");
  }
  const Entry& e = *entry(spec.name);
  if (e.versions.count(spec.version) != 0) {
    return make_error(Error::Code::kInvalidArgument, "model " + spec.name + " version " + spec.version + " is already served", "version");
  }
  if (e.contract) {
    if (auto same = features::same_feature_contract(*e.contract, spec); !same) return tl::unexpected(same.error());
  }
  auto out = std::make_shared<ServedVersion>();
  out->name = spec.name;
  out->version = spec.version;
  out->model_index = static_cast<std::size_t>(at - names_.begin());
  out->model = std::move(model);
  return out;
}

void ModelTable::publish(HeldVersion version) {
  std::unique_lock lock(mutex_);
  Entry& e = entries_[version->name];
  if (!e.contract) e.contract = version->model->spec();
  unloaded_.erase(version->name);  // it serves again: it counts for readiness
  e.versions[version->version] = std::move(version);
}

Result<HeldVersion> ModelTable::add(std::unique_ptr<api::Model> model) {
  auto prepared = prepare(std::move(model));
  if (!prepared) return tl::unexpected(prepared.error());
  publish(*prepared);
  return HeldVersion(std::move(*prepared));
}

HeldVersion ModelTable::remove(const std::string& name, const std::string& version) {
  std::unique_lock lock(mutex_);
  const auto e = entries_.find(name);
  if (e == entries_.end()) return nullptr;
  const auto it = e->second.versions.find(version);
  if (it == e->second.versions.end()) return nullptr;
  HeldVersion out = std::move(it->second);
  e->second.versions.erase(it);
  std::erase_if(e->second.labels, [&](const auto& label) { return label.second == version; });
  return out;
}

void ModelTable::set_unloaded(const std::string& name, bool unloaded) {
  std::unique_lock lock(mutex_);
  if (unloaded) {
    unloaded_.insert(name);
  } else {
    unloaded_.erase(name);
  }
}

std::vector<std::string> ModelTable::missing() const {
  std::shared_lock lock(mutex_);
  std::vector<std::string> out;
  for (const auto& name : names_) {
    const auto e = entries_.find(name);
    if (unloaded_.count(name) == 0 && (e == entries_.end() || e->second.versions.empty())) out.push_back(name);
  }
  return out;
}

std::vector<std::string> ModelTable::set_labels(const std::string& name, const std::map<std::string, std::string>& labels) {
  std::unique_lock lock(mutex_);
  std::vector<std::string> refused;
  const auto e = entries_.find(name);
  if (e == entries_.end()) return refused;
  e->second.labels.clear();
  for (const auto& [label, version] : labels) {
    if (e->second.versions.count(version) == 0) {
      refused.push_back("label " + label + " points at version " + version + ", which is not ready");
    } else {
      e->second.labels[label] = version;
    }
  }
  return refused;
}

std::vector<HeldVersion> ModelTable::versions(const std::string& name) const {
  std::shared_lock lock(mutex_);
  std::vector<HeldVersion> out;
  if (const Entry* e = entry(name)) {
    for (const auto& [v, held] : e->versions) out.push_back(held);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return version_less(a->version, b->version); });
  return out;
}

std::vector<HeldVersion> ModelTable::all() const {
  std::vector<HeldVersion> out;
  for (const auto& name : names_) {
    auto v = versions(name);
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

HeldVersion ModelTable::default_version(const std::string& name) const {
  std::shared_lock lock(mutex_);
  const Entry* e = entry(name);
  return e == nullptr ? nullptr : default_of(*e);
}

std::map<std::string, std::string> ModelTable::labels(const std::string& name) const {
  std::shared_lock lock(mutex_);
  const Entry* e = entry(name);
  return e == nullptr ? std::map<std::string, std::string>{} : e->labels;
}

}  // namespace numaserve::lifecycle
