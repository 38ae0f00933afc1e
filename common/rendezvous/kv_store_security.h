#ifndef TESSERA_COMMON_RENDEZVOUS_KV_STORE_SECURITY_H_
#define TESSERA_COMMON_RENDEZVOUS_KV_STORE_SECURITY_H_

#include <string>

namespace tessera {

// How the rendezvous store and its clients authenticate each other. Both sides must agree:
// a mismatch fails the connection with an error naming what differs, never a misread
// stream.
//
// - The join secret is always proven, as an HMAC challenge-response in both directions
//   (kv_store_handshake.h): the secret never crosses the wire, a client without it can
//   neither read nor write keys, and a client learns that the store is the cluster's own
//   before it publishes anything (an NCCL unique id, a shm segment name). An empty secret
//   is a secret too, so a cluster run without --join-secret-file still works, unprotected.
// - With TLS files, the connection is TLS first (1.2 or later) and both sides present
//   certificates that must chain to the cluster CA; this also keeps the traffic after the
//   handshake confidential and tamper-proof, which the secret alone cannot.
struct KvStoreSecurity {
  std::string join_secret;
  std::string ca_file;    // PEM bundle both sides' certificates must chain to.
  std::string cert_file;  // This side's PEM certificate chain.
  std::string key_file;   // Its private key.
  // Client side: the name the store's certificate must carry (a DNS name or an IP SAN);
  // empty: the host the client connects to.
  std::string server_name;

  bool tls() const { return !ca_file.empty(); }
};

}  // namespace tessera

#endif  // TESSERA_COMMON_RENDEZVOUS_KV_STORE_SECURITY_H_
