#ifndef TESSERA_COMMON_RENDEZVOUS_KV_STORE_HANDSHAKE_H_
#define TESSERA_COMMON_RENDEZVOUS_KV_STORE_HANDSHAKE_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/rendezvous/conn.h"
#include "common/rendezvous/kv_store_security.h"

namespace tessera::comm_internal {

// The opening of a store connection, before any request: TLS when `security` has files
// (certificates verified both ways against the cluster CA), then the join-secret
// challenge-response of kv_store_protocol.h in both directions. The certificate files are
// read for every connection, so a rotated certificate is used from the next one on
// without a reload step (a rank connects once per group formation, so this is cheap).
//
// Server side. An error says why the peer was refused (the caller logs it with the
// peer's address); a peer with a wrong secret has also been told kKvDenied.
absl::Status AcceptHandshake(Conn& conn, const KvStoreSecurity& security, absl::Time deadline);

// Client side. `host` is what was dialled: the store's certificate must name it unless
// security.server_name overrides it.
absl::Status ConnectHandshake(Conn& conn, const KvStoreSecurity& security, absl::string_view host,
                              absl::Time deadline);

}  // namespace tessera::comm_internal

#endif  // TESSERA_COMMON_RENDEZVOUS_KV_STORE_HANDSHAKE_H_
