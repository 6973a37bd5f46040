// The reply owed to a request, without a socket: a Responder on a recording
// ReplySink delivers exactly one reply, and one dropped unsent says so.
#include "http/handler.h"

#include <gtest/gtest.h>

#include <memory>
#include <utility>
#include <vector>

namespace numaserve::http {
namespace {

class RecordingSink final : public ReplySink {
 public:
  void send(Reply reply) override { sent.push_back(std::move(reply)); }
  void dropped() override { ++drops; }

  std::vector<Reply> sent;
  int drops = 0;
};

TEST(Responder, SendsExactlyOnce) {
  auto sink = std::make_shared<RecordingSink>();
  {
    Responder responder(sink);
    Reply first;
    first.body = "first";
    responder.send(std::move(first));
    Reply second;
    second.body = "second";
    responder.send(std::move(second));  // nothing: the reply was given
  }
  ASSERT_EQ(sink->sent.size(), 1u);
  EXPECT_EQ(sink->sent[0].body, "first");
  EXPECT_EQ(sink->drops, 0);  // sent, so not dropped when it goes
}

TEST(Responder, DroppedUnsentSaysSoOnce) {
  auto sink = std::make_shared<RecordingSink>();
  {
    Responder responder(sink);
    Responder moved(std::move(responder));  // the moved-from one owes nothing
  }
  EXPECT_TRUE(sink->sent.empty());
  EXPECT_EQ(sink->drops, 1);
}

TEST(Responder, KeepsItsSinkAliveUntilItAnswers) {
  auto sink = std::make_shared<RecordingSink>();
  std::weak_ptr<RecordingSink> watch = sink;
  Responder responder(std::move(sink));
  EXPECT_FALSE(watch.expired());
  auto kept = watch.lock();
  responder.send(Reply{});
  EXPECT_EQ(kept->sent.size(), 1u);
  kept.reset();
  EXPECT_TRUE(watch.expired());  // let go once answered
}

}  // namespace
}  // namespace numaserve::http
