#ifndef TESSERA_TESTS_COORDINATOR_SCHEDULER_TEST_UTIL_H_
#define TESSERA_TESTS_COORDINATOR_SCHEDULER_TEST_UTIL_H_

// Helpers shared by the scheduler's unit tests.

#include <memory>
#include <numeric>
#include <vector>

#include "coordinator/scheduler/scheduler.h"
#include "gtest/gtest.h"

namespace tessera::sched::testing {

// first, first + 1, ..., first + n - 1.
inline std::vector<int32_t> Range(int32_t first, int n) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

// The scheduler for `config`, or null (and a test failure) when Create refuses it.
inline std::unique_ptr<Scheduler> Make(const SchedulerConfig& config) {
  auto s = Scheduler::Create(config);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

// Update(result), which must succeed; its events.
inline std::vector<SeqEvent> MustUpdate(Scheduler& s, const StepResult& result) {
  auto events = s.Update(result);
  EXPECT_TRUE(events.ok()) << events.status();
  return events.ok() ? *events : std::vector<SeqEvent>{};
}

}  // namespace tessera::sched::testing

#endif  // TESSERA_TESTS_COORDINATOR_SCHEDULER_TEST_UTIL_H_
