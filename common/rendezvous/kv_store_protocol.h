#ifndef TESSERA_COMMON_RENDEZVOUS_KV_STORE_PROTOCOL_H_
#define TESSERA_COMMON_RENDEZVOUS_KV_STORE_PROTOCOL_H_

#include <cstdint>

// Wire format of the rendezvous key-value store (little-endian):
//   request  = op:u8, then
//     kSet:  key:(u32 len, bytes) value:(u64 len, bytes)
//     kGet:  key
//     kWait: n:u32, n keys, timeout_ms:u64
//   response = code:u8, and for kGet with kOk: value:(u64 len, bytes)
namespace tessera::comm_internal {

enum KvOp : uint8_t { kKvSet = 1, kKvGet = 2, kKvWait = 3 };
enum KvCode : uint8_t { kKvOk = 0, kKvNotFound = 1, kKvTimeout = 2, kKvShuttingDown = 3 };

inline constexpr uint32_t kKvMaxKeyBytes = 4096;
inline constexpr uint32_t kKvMaxKeysPerWait = 4096;
inline constexpr uint64_t kKvMaxValueBytes = uint64_t{64} << 20;

}  // namespace tessera::comm_internal

#endif  // TESSERA_COMMON_RENDEZVOUS_KV_STORE_PROTOCOL_H_
