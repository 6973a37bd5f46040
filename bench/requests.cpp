#include "requests.h"

#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

namespace numaserve::bench {

Result<RequestSet> make_requests(const std::filesystem::path& store_file, std::size_t count, std::size_t items,
                                 std::uint64_t seed) {
  std::vector<std::string> users, item_ids;
  std::ifstream in(store_file);
  if (!in) return make_error(Error::Code::kNotFound, "cannot read " + store_file.string());
  for (std::string line; std::getline(in, line);) {
    const auto entity = nlohmann::json::parse(line, nullptr, false);
    if (!entity.is_object() || !entity.contains("id")) continue;
    (entity.value("kind", "") == "user" ? users : item_ids).push_back(entity["id"].get<std::string>());
  }
  if (users.empty() || item_ids.empty()) {
    return make_error(Error::Code::kInvalidArgument, store_file.string() + ": needs users and items");
  }
  std::mt19937_64 rng(seed);
  const char* devices[] = {"ios", "android", "web"};
  RequestSet out;
  for (std::size_t r = 0; r < count; ++r) {
    features::Request request;
    request.user.id = users[rng() % users.size()];
    const double hour = static_cast<double>(rng() % 24);
    const std::string device = devices[rng() % 3];
    request.context = {{"hour", hour}, {"device", device}};
    nlohmann::json json_items = nlohmann::json::array();
    for (std::size_t i = 0; i < items; ++i) {
      request.items.push_back({item_ids[rng() % item_ids.size()], {}});
      json_items.push_back({{"id", request.items.back().id}});
    }
    out.bodies.push_back(nlohmann::json{{"user", {{"id", request.user.id}}},
                                        {"context", {{"hour", hour}, {"device", device}}},
                                        {"items", json_items}}
                             .dump());
    out.requests.push_back(std::move(request));
  }
  return out;
}

}  // namespace numaserve::bench
