#pragma once
// What a worker's turn leaves to do, as the application tells the worker's
// event loop: the transport asks it (http::Handler::on_turn), the batcher
// answers it (batching::Batcher::run_turn). One type for both: neither part
// knows the other, and neither copies the other's fields.

#include <chrono>
#include <cstddef>
#include <optional>
#include <vector>

namespace numaserve {

struct Turn {
  // Run again as soon as the ready network events are handled (a queue is not empty).
  bool more_work = false;
  // Else sleep at most until then (max_batch_delay: a batch starts then).
  std::optional<std::chrono::steady_clock::time_point> wake_at;
  // Workers to give a turn now: idle ones that may take a share.
  std::vector<std::size_t> wake_workers;
};

}  // namespace numaserve
