#ifndef TESSERA_WORKER_COMM_GLOO_KV_STORE_H_
#define TESSERA_WORKER_COMM_GLOO_KV_STORE_H_

#include <chrono>
#include <string>
#include <vector>

#include "common/rendezvous/kv_store_client.h"
#include "gloo/rendezvous/store.h"

namespace tessera {

// Adapts KvStoreClient to Gloo's rendezvous Store. Gloo expects a blocking get and
// reports failures by exception, so errors are thrown as gloo::IoException.
class GlooKvStore final : public gloo::rendezvous::Store {
 public:
  GlooKvStore(KvStoreClient& client, std::chrono::milliseconds timeout)
      : client_(client), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  KvStoreClient& client_;
  const std::chrono::milliseconds timeout_;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_COMM_GLOO_KV_STORE_H_
