#ifndef TESSERA_TESTS_SUPPORT_SANITIZERS_H_
#define TESSERA_TESTS_SUPPORT_SANITIZERS_H_

// Whether this build runs under AddressSanitizer (scripts/sanitize.sh, scripts/fuzz.sh).
// Its allocator keeps freed memory in a quarantine and adds redzones, so bounds on a
// process's RSS measure ASan, not our code: tests assert them in the other builds only.
namespace tessera::testing {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kUnderAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kUnderAddressSanitizer = true;
#else
inline constexpr bool kUnderAddressSanitizer = false;
#endif
#else
inline constexpr bool kUnderAddressSanitizer = false;
#endif

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_SUPPORT_SANITIZERS_H_
