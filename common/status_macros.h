#ifndef TESSERA_COMMON_STATUS_MACROS_H_
#define TESSERA_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Early-return helpers in the style of Abseil-based codebases.
#define TESSERA_CONCAT_INNER_(a, b) a##b
#define TESSERA_CONCAT_(a, b) TESSERA_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                      \
  do {                                             \
    ::absl::Status tessera_status_ = (expr);       \
    if (!tessera_status_.ok()) return tessera_status_; \
  } while (0)

#define ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                           \
  if (!tmp.ok()) return std::move(tmp).status(); \
  lhs = std::move(tmp).value()

#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL_(TESSERA_CONCAT_(tessera_statusor_, __LINE__), lhs, expr)

#endif  // TESSERA_COMMON_STATUS_MACROS_H_
