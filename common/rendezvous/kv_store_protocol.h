#ifndef TESSERA_COMMON_RENDEZVOUS_KV_STORE_PROTOCOL_H_
#define TESSERA_COMMON_RENDEZVOUS_KV_STORE_PROTOCOL_H_

#include <cstddef>
#include <cstdint>

// Wire format of the rendezvous key-value store (little-endian). A connection opens with
// the handshake of kv_store_handshake.h (inside TLS when the cluster has it):
//   server: kKvMagic (4 bytes), server nonce (32)
//   client: client nonce (32), HMAC-SHA256(secret, "client" | server nonce | client nonce)
//   server: kKvOk and HMAC-SHA256(secret, "server" | server nonce | client nonce), or
//           kKvDenied and a close
// then requests:
//   request  = op:u8, then
//     kSet:  key:(u32 len, bytes) value:(u64 len, bytes)
//     kGet:  key
//     kWait: n:u32, n keys, timeout_ms:u64
//   response = code:u8, and for kGet with kOk: value:(u64 len, bytes)
namespace tessera::comm_internal {

enum KvOp : uint8_t { kKvSet = 1, kKvGet = 2, kKvWait = 3 };
enum KvCode : uint8_t { kKvOk = 0, kKvNotFound = 1, kKvTimeout = 2, kKvShuttingDown = 3, kKvDenied = 4 };

// "TKV" and a protocol version: a peer speaking anything else fails at once, by name.
inline constexpr char kKvMagic[4] = {'T', 'K', 'V', '1'};
inline constexpr size_t kKvNonceBytes = 32;
inline constexpr size_t kKvMacBytes = 32;

inline constexpr uint32_t kKvMaxKeyBytes = 4096;
inline constexpr uint32_t kKvMaxKeysPerWait = 4096;
inline constexpr uint64_t kKvMaxValueBytes = uint64_t{64} << 20;

}  // namespace tessera::comm_internal

#endif  // TESSERA_COMMON_RENDEZVOUS_KV_STORE_PROTOCOL_H_
