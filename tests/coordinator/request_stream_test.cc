// RequestStream's non-blocking side, which the callback reactors depend on: every queued
// event notifies the listener, a refused one does not, TryPop coalesces without waiting,
// and no listener call happens after SetListener(nullptr).
#include "coordinator/engine/request_stream.h"

#include <atomic>
#include <thread>

#include "gtest/gtest.h"

namespace tessera {
namespace {

RequestEvent Tokens(std::vector<int32_t> ids, std::string text) {
  RequestEvent e;
  e.token_ids = std::move(ids);
  e.text = std::move(text);
  return e;
}

TEST(RequestStreamTest, ListenerHearsEveryQueuedEventButNotARefusedOne) {
  RequestStream stream(/*max_undelivered_tokens=*/3);
  int calls = 0;
  stream.SetListener([&] { ++calls; });
  EXPECT_TRUE(stream.Push(Tokens({1, 2}, "ab")));
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(stream.Push(Tokens({3, 4}, "cd")));  // 4 > 3 undelivered.
  EXPECT_EQ(calls, 1);
  RequestEvent end;
  end.finished = true;
  end.finish_reason = sched::FinishReason::kLength;
  EXPECT_TRUE(stream.Push(std::move(end)));  // The end always queues.
  EXPECT_EQ(calls, 2);
}

TEST(RequestStreamTest, TryPopCoalescesWithoutWaiting) {
  RequestStream stream;
  EXPECT_FALSE(stream.TryPop().has_value());
  stream.Push(Tokens({1}, "a"));
  stream.Push(Tokens({2, 3}, "bc"));
  std::optional<RequestEvent> e = stream.TryPop();
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->token_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(e->text, "abc");
  EXPECT_FALSE(e->finished);
  EXPECT_EQ(stream.num_undelivered_tokens(), 0);
  EXPECT_FALSE(stream.TryPop().has_value());
}

TEST(RequestStreamTest, ListenerMayPopAndNoCallFollowsClearing) {
  RequestStream stream;
  std::atomic<int> popped{0};
  stream.SetListener([&] {
    if (auto e = stream.TryPop(); e.has_value()) popped += static_cast<int>(e->token_ids.size());
  });
  std::thread producer([&] {
    for (int i = 0; i < 1000; ++i) stream.Push(Tokens({i}, "x"));
  });
  producer.join();
  EXPECT_EQ(popped.load(), 1000);
  stream.SetListener(nullptr);
  stream.Push(Tokens({7}, "y"));
  EXPECT_EQ(popped.load(), 1000);
  EXPECT_EQ(stream.num_undelivered_tokens(), 1);
}

}  // namespace
}  // namespace tessera
