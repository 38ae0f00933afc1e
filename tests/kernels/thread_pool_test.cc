#include "kernels/cpu/thread_pool.h"

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace tessera::kernels {
namespace {

TEST(ThreadPoolTest, CoversEveryIndexExactlyOnce) {
  ThreadPool pool(3);
  for (int64_t n : {1, 2, 7, 1000, 100003}) {
    for (int64_t grain : {1, 16, 5000}) {
      std::vector<std::atomic<int>> hits(n);
      pool.ParallelFor(n, grain, [&](int64_t b, int64_t e) {
        EXPECT_LT(b, e);
        for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
    }
  }
}

// Two threads sharing one pool (say, a worker's step and a warm-up) must not mix up their
// loops.
TEST(ThreadPoolTest, ConcurrentCallersTakeTurns) {
  ThreadPool pool(3);
  auto caller = [&pool](int64_t n, int64_t* result) {
    for (int round = 0; round < 200; ++round) {
      std::atomic<int64_t> sum{0};
      pool.ParallelFor(n, 1, [&](int64_t b, int64_t e) {
        int64_t s = 0;
        for (int64_t i = b; i < e; ++i) s += i;
        sum.fetch_add(s);
      });
      if (sum.load() != n * (n - 1) / 2) {
        *result = sum.load();
        return;
      }
    }
    *result = n * (n - 1) / 2;
  };
  int64_t a = 0, b = 0;
  std::thread t1(caller, 1000, &a);
  std::thread t2(caller, 777, &b);
  t1.join();
  t2.join();
  EXPECT_EQ(a, 1000 * 999 / 2);
  EXPECT_EQ(b, 777 * 776 / 2);
}

}  // namespace
}  // namespace tessera::kernels
