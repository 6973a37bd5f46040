#include "api/readiness.h"

namespace numaserve::api {

void Readiness::worker_warm(std::optional<Error> failure) {
  std::lock_guard lock(mutex_);
  if (failure && !failure_) failure_ = std::move(failure);
  ++warm_workers_;
  cv_.notify_all();
}

Status Readiness::wait_until_warm() {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [this] { return warm_workers_ == workers_; });
  if (failure_) return tl::unexpected(*failure_);
  warm_ = true;
  update();
  return {};
}

void Readiness::open_group() {
  group_open_ = true;
  update();
}

void Readiness::begin_drain() {
  draining_ = true;
  update();
}

void Readiness::update() { ready_ = warm_ && (group_open_ || !wait_for_group_) && !draining_; }

std::string Readiness::reason() const {
  return draining_ ? "draining" : !warm_ ? "warming up" : "waiting for the other replicas";
}

}  // namespace numaserve::api
