#ifndef TESSERA_TESTS_E2E_METRICS_TEXT_H_
#define TESSERA_TESTS_E2E_METRICS_TEXT_H_

// Reading samples out of a Prometheus text exposition (the coordinator's /metrics body).

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace tessera::testing {

// Sum over every sample of `name` (all label sets: every replica) whose labels contain
// `label` (e.g. `outcome="ok"`; empty: all), 0 when absent.
inline double MetricSum(const std::string& metrics, const std::string& name, const std::string& label = "") {
  double sum = 0;
  for (absl::string_view line : absl::StrSplit(metrics, '\n')) {
    if (!absl::StartsWith(line, name + "{") && !absl::StartsWith(line, name + " ")) continue;
    if (!label.empty() && !absl::StrContains(line.substr(0, line.find('}')), label)) continue;
    double v = 0;
    if (absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &v)) sum += v;
  }
  return sum;
}

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_E2E_METRICS_TEXT_H_
