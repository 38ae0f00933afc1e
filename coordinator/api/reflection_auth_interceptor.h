#ifndef TESSERA_COORDINATOR_API_REFLECTION_AUTH_INTERCEPTOR_H_
#define TESSERA_COORDINATOR_API_REFLECTION_AUTH_INTERCEPTOR_H_

#include <memory>

#include "common/auth/api_keys.h"
#include "grpcpp/support/server_interceptor.h"

namespace tessera {

// Puts gRPC server reflection (grpc.reflection.*) behind the same API keys as the
// Generation service: reflection hands out the whole schema of the public API, so a
// server that asks for keys should not describe itself to callers without one.
//
// gRPC's reflection service is its own code (the plugin), so the check cannot live in a
// handler; and a server interceptor cannot end a call before the handler runs. So, for a
// call whose `authorization` is not `Bearer <valid key>`, every request it sends is
// cleared before the handler sees it (so no answer can name a symbol or file), every
// answer becomes an error_response with UNAUTHENTICATED, and the call ends UNAUTHENTICATED.
//
// grpc.health.v1.Health stays open on purpose: Kubernetes' gRPC probes (and most load
// balancers) cannot send a header, and it says only SERVING or NOT_SERVING.
//
// `keys` must outlive the server; the factory is only for servers that have keys.
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> ReflectionAuthInterceptorFactory(
    const auth::ApiKeyStore* keys);

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_API_REFLECTION_AUTH_INTERCEPTOR_H_
