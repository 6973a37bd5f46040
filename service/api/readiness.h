#pragma once
// Whether the service takes requests, as /readyz and /v2/health/ready say:
// every worker pinned itself and warmed every model up, the supervisor's
// group is open (when the service waits for one), and it is not draining.

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <optional>
#include <string>

#include "numaserve/common/result.h"

namespace numaserve::api {

class Readiness {
 public:
  Readiness(std::size_t workers, bool wait_for_group) : workers_(workers), wait_for_group_(wait_for_group) {}

  // Each worker once, warm or failed (the first failure is kept).
  void worker_warm(std::optional<Error> failure);
  // Blocks until every worker has reported; then ready (but for the group).
  Status wait_until_warm();
  void open_group();   // the supervisor says every replica is warm
  void begin_drain();  // readiness goes false; requests are still served

  bool ready() const { return ready_.load(); }
  bool warm() const { return warm_.load(); }
  std::string reason() const;  // why not ready: "warming up", ...

 private:
  void update();
  const std::size_t workers_;
  const bool wait_for_group_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::size_t warm_workers_ = 0;
  std::optional<Error> failure_;
  std::atomic<bool> ready_{false}, warm_{false}, group_open_{false}, draining_{false};
};

}  // namespace numaserve::api
