#include "levels.h"

#include <sstream>

namespace numaserve::bench {
namespace {

// `body` with "parameters" first: {"parameters":{...},...}.
std::string with_parameters(const std::string& body, std::size_t priority, long long timeout_us) {
  nlohmann::json parameters = nlohmann::json::object();
  if (priority > 0) parameters["priority"] = priority;
  if (timeout_us >= 0) parameters["timeout"] = timeout_us;
  if (parameters.empty()) return body;
  return "{\"parameters\":" + parameters.dump() + "," + body.substr(1);
}

struct Share {
  std::size_t level;
  double rate;
};

Result<std::vector<Share>> parse_mix(const std::string& mix) {
  std::vector<Share> out;
  std::stringstream items(mix);
  for (std::string item; std::getline(items, item, ',');) {
    const auto colon = item.find(':');
    Share s{0, 0};
    try {
      s = {colon == std::string::npos ? 0 : std::stoul(item.substr(0, colon)),
           colon == std::string::npos ? 0 : std::stod(item.substr(colon + 1))};
    } catch (const std::exception&) {
    }
    if (s.level == 0 || !(s.rate > 0)) {
      return make_error(Error::Code::kInvalidArgument, "--mix: '" + item + "': want LEVEL:RATE, a level of 1 or more and a rate above 0", "mix");
    }
    out.push_back(s);
  }
  if (out.empty()) return make_error(Error::Code::kInvalidArgument, "--mix: want LEVEL:RATE,...", "mix");
  return out;
}

}  // namespace

Status apply_levels(const LevelOptions& o, std::vector<std::string>& bodies, LoadConfig& config) {
  if (o.mix.empty()) {
    for (auto& body : bodies) body = with_parameters(body, o.priority, o.timeout_us);
    return {};
  }
  if (o.priority > 0) return make_error(Error::Code::kInvalidArgument, "give --priority or --mix, not both", "mix");
  auto shares = parse_mix(o.mix);
  if (!shares) return tl::unexpected(shares.error());
  double total = 0;
  for (const auto& s : *shares) total += s.rate;
  // Smooth weighted round robin (nginx's): each level's requests spread
  // evenly through the sequence, in proportion to its rate.
  constexpr std::size_t kSequence = 1000;
  std::vector<double> credit(shares->size(), 0);
  std::vector<std::string> mixed;
  config.classes.clear();
  for (std::size_t j = 0; j < kSequence; ++j) {
    std::size_t pick = 0;
    for (std::size_t k = 0; k < shares->size(); ++k) {
      credit[k] += (*shares)[k].rate;
      if (credit[k] > credit[pick]) pick = k;
    }
    credit[pick] -= total;
    const std::size_t level = (*shares)[pick].level;
    mixed.push_back(with_parameters(bodies[j % bodies.size()], o.unnamed ? 0 : level, o.timeout_us));
    config.classes.push_back(level);
  }
  bodies = std::move(mixed);
  config.rate = total;
  return {};
}

nlohmann::json by_level(const LoadResult& result) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [level, r] : result.by_class) {
    std::size_t other = 0;
    for (const auto& [status, l] : r.latencies) other += status == 200 || status == 503 ? 0 : l.count;
    const auto of = [&r](int status) { return r.latencies.count(status) ? r.latencies.at(status) : Latencies{}; };
    out[std::to_string(level)] = {{"answered", of(200).count}, {"refused", of(503).count}, {"other", other},
                                  {"p50_ms", of(200).p50_ms},  {"p99_ms", of(200).p99_ms}, {"refused_p99_ms", of(503).p99_ms}};
  }
  return out;
}

}  // namespace numaserve::bench
