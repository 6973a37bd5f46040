// The benchmark's gRPC client: gRPC C++ (Debian's, the agent's library; a
// client of the product, not part of it) through a generic stub, so the
// messages are the bytes the benchmark made and no generated code is
// compiled here. Closed loop: `connections` channels, each its own HTTP/2
// connection, each with one call outstanding — the load (b) puts on
// HTTP/1.1 connections — all driven by one thread's completion queue.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <memory>

#include "loadgen.h"
#include "recorder.h"

namespace numaserve::bench {
namespace {

// One channel's call in flight.
struct Slot {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<grpc::GenericStub> stub;
  std::unique_ptr<grpc::ClientContext> context;
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> call;
  grpc::ByteBuffer reply;
  grpc::Status status;
  Clock::time_point sent;
  std::size_t next = 0;  // the body it sends next
};

grpc::ByteBuffer buffer_of(const std::string& bytes) {
  grpc::Slice slice(bytes.data(), bytes.size());
  return grpc::ByteBuffer(&slice, 1);
}

// gRPC's codes as the recorder's statuses: 200 for OK, as HTTP's.
int status_of(const grpc::Status& status) { return status.ok() ? 200 : 1000 + status.error_code(); }

}  // namespace

LoadResult run_grpc_load(const LoadConfig& config) {
  const auto start = Clock::now();
  Recorder recorder;
  recorder.measure_from = start + seconds(config.warmup_seconds);
  recorder.end = recorder.measure_from + seconds(config.seconds);
  std::vector<grpc::ByteBuffer> messages;
  for (const auto& body : config.bodies) messages.push_back(buffer_of(body));
  grpc::CompletionQueue queue;
  std::vector<Slot> slots(config.connections);
  const std::string target = config.host + ":" + std::to_string(config.port);
  for (std::size_t i = 0; i < slots.size(); ++i) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection of its own, not a shared one
    args.SetInt("numaserve.bench.channel", static_cast<int>(i));
    slots[i].channel = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
    slots[i].stub = std::make_unique<grpc::GenericStub>(slots[i].channel);
    slots[i].next = i;
  }
  auto send = [&](std::size_t i) {
    Slot& s = slots[i];
    s.context = std::make_unique<grpc::ClientContext>();
    s.context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    s.sent = Clock::now();
    s.call = s.stub->PrepareUnaryCall(s.context.get(), config.path, messages[s.next % messages.size()], &queue);
    s.next += slots.size();
    s.call->StartCall();
    s.call->Finish(&s.reply, &s.status, reinterpret_cast<void*>(i));
  };
  for (std::size_t i = 0; i < slots.size(); ++i) send(i);
  std::size_t in_flight = slots.size();
  void* tag = nullptr;
  bool ok = false;
  while (in_flight > 0 && queue.Next(&tag, &ok)) {
    const auto i = reinterpret_cast<std::size_t>(tag);
    const auto done = Clock::now();
    recorder.record(slots[i].sent, slots[i].sent, done, ok ? status_of(slots[i].status) : 0);
    if (done < recorder.end) {
      send(i);
    } else {
      --in_flight;
    }
  }
  queue.Shutdown();
  while (queue.Next(&tag, &ok)) {
  }
  return recorder.finish(config.seconds);
}

}  // namespace numaserve::bench
