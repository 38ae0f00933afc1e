#ifndef TESSERA_COORDINATOR_METRICS_REQUEST_LOG_H_
#define TESSERA_COORDINATOR_METRICS_REQUEST_LOG_H_

#include "coordinator/metrics/engine_metrics.h"

namespace tessera {

// One info line per finished request on stderr (see common/logging.h for the format):
// id, replica, tokens in/out, cached tokens, queue time, TTFT, duration, finish reason.
void LogFinishedRequest(const FinishedRequestRecord& r);

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_METRICS_REQUEST_LOG_H_
