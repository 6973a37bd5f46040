#pragma once
// The service's Prometheus metrics (text exposition format 0.0.4): requests
// by route and status, latency histograms per stage and model, batch sizes,
// and gauges sampled when scraped. Recording is a few atomic adds; the
// histograms have fixed buckets so no request allocates.

#include <array>
#include <atomic>
#include <deque>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace numaserve::metrics {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);
  // `name{labels,le="..."} n` lines, then _sum and _count.
  void render(std::string& out, const std::string& name, const std::string& labels) const;

 private:
  std::vector<double> bounds_;
  std::vector<std::atomic<std::uint64_t>> counts_;  // one per bound, plus +Inf
  std::atomic<double> sum_{0};
};

enum class Stage { kQuery, kExtract, kQueue, kForward, kTotal };
inline constexpr std::array<const char*, 5> kStageNames = {"query", "extract", "queue", "forward", "total"};

// Values read at scrape time.
struct Gauges {
  std::size_t queue_depth = 0;
  std::size_t in_flight = 0;
  std::size_t busy_workers = 0;
  bool ready = false;
  std::map<std::string, std::string> placement;  // labels of numaserve_placement_info
  std::map<std::string, double> model_local_ratio;  // model -> share of weight pages on the service's nodes
  std::map<std::string, std::size_t> threads;       // kind -> count
};

class Metrics {
 public:
  explicit Metrics(const std::vector<std::string>& models);

  void count_request(const std::string& route, int status);
  // `model` must be one given to the constructor; others are dropped.
  void observe(Stage stage, const std::string& model, double seconds);
  void observe_batch(std::size_t items, std::size_t requests);

  std::string render(const Gauges& gauges) const;

 private:
  mutable std::mutex requests_mutex_;
  std::map<std::pair<std::string, int>, std::uint64_t> requests_;
  // Per model, one histogram per stage; built once, so lookups need no lock.
  std::map<std::string, std::deque<Histogram>> stages_;
  Histogram batch_items_;
  Histogram batch_requests_;
};

}  // namespace numaserve::metrics
