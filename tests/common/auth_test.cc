#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/auth/api_keys.h"
#include "common/auth/constant_time.h"
#include "common/auth/secret.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::auth {
namespace {

using ::testing::HasSubstr;

std::filesystem::path TempFile(const std::string& name) {
  return std::filesystem::temp_directory_path() / absl::StrCat("tessera_auth_test_", ::getpid(), "_", name);
}

void WriteFile(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

TEST(Sha256Test, KnownVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256("abc").size(), 32u);
}

TEST(ConstantTimeEqualsTest, ComparesWholeInputs) {
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_TRUE(ConstantTimeEquals("secret", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("secret", "secreT"));  // Last byte.
  EXPECT_FALSE(ConstantTimeEquals("secret", "Secret"));  // First byte.
  EXPECT_FALSE(ConstantTimeEquals("secret", "secre"));
  EXPECT_FALSE(ConstantTimeEquals(std::string("a\0b", 3), std::string("a\0c", 3)));
}

TEST(SecretMatchesTest, EqualOnlyForTheSameSecret) {
  EXPECT_TRUE(SecretMatches("join-me", "join-me"));
  EXPECT_FALSE(SecretMatches("join-me", "join-m"));
  EXPECT_FALSE(SecretMatches("join-me", ""));
}

TEST(ParseApiKeysTest, DigestsCommentsAndBlankLines) {
  const std::string a = Sha256Hex("key-a"), b = Sha256Hex("key-b");
  auto parsed = ParseApiKeys(absl::StrCat("# team a\nsha256:", a, "\n\n  sha256:", absl::AsciiStrToUpper(b),
                                          "  \r\n"));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->size(), 2u);
  EXPECT_EQ((*parsed)[0], Sha256("key-a"));
  EXPECT_EQ((*parsed)[1], Sha256("key-b"));  // Upper-case hex is the same digest.
  EXPECT_TRUE(ParseApiKeys("").ok());
}

TEST(ParseApiKeysTest, BadLinesNamedByNumberWithoutEchoingThem) {
  const std::string good = absl::StrCat("sha256:", Sha256Hex("k"), "\n");
  for (const std::string& bad : {std::string("plain-key-pasted"), absl::StrCat("sha256:", Sha256Hex("k"), "0"),
                                 absl::StrCat("sha512:", Sha256Hex("k")),
                                 absl::StrCat("sha256:", Sha256Hex("k").substr(1), "g")}) {
    auto parsed = ParseApiKeys(absl::StrCat(good, "# c\n", bad, "\n"));
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(parsed.status().message(), HasSubstr("line 3"));
    EXPECT_THAT(std::string(parsed.status().message()), ::testing::Not(HasSubstr(bad)));
  }
}

TEST(BearerTokenTest, Parses) {
  EXPECT_EQ(BearerToken("Bearer abc"), "abc");
  EXPECT_EQ(BearerToken("bearer  abc "), "abc");
  EXPECT_EQ(BearerToken("Basic abc"), "");
  EXPECT_EQ(BearerToken("abc"), "");
  EXPECT_EQ(BearerToken(""), "");
}

TEST(ApiKeyStoreTest, ChecksAndReloadsWhenTheFileChanges) {
  const auto path = TempFile("keys");
  WriteFile(path, absl::StrCat("sha256:", Sha256Hex("old-key"), "\n"));
  auto store = ApiKeyStore::Open(path.string(), std::chrono::milliseconds(0));
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_TRUE((*store)->Check("Bearer old-key").ok());
  EXPECT_EQ((*store)->Check("Bearer wrong").code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ((*store)->Check("").code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string((*store)->Check("Bearer wrong").message()), ::testing::Not(HasSubstr("wrong")));

  // Rotation: the new file replaces the old keys.
  WriteFile(path, absl::StrCat("sha256:", Sha256Hex("new-key"), "\nsha256:", Sha256Hex("other"), "\n"));
  ASSERT_TRUE((*store)->ReloadIfChanged().ok());
  EXPECT_EQ((*store)->num_keys(), 2u);
  EXPECT_TRUE((*store)->Check("Bearer new-key").ok());
  EXPECT_FALSE((*store)->Check("Bearer old-key").ok());

  // A bad file is refused and the keys in force stay.
  WriteFile(path, "not a digest\n");
  const absl::Status bad = (*store)->ReloadIfChanged();
  EXPECT_THAT(bad.message(), HasSubstr("line 1"));
  EXPECT_TRUE((*store)->Check("Bearer new-key").ok());
  std::filesystem::remove(path);
}

TEST(ApiKeyStoreTest, PollerPicksUpRotation) {
  const auto path = TempFile("polled");
  WriteFile(path, absl::StrCat("sha256:", Sha256Hex("k1"), "\n"));
  auto store = ApiKeyStore::Open(path.string(), std::chrono::milliseconds(20));
  ASSERT_TRUE(store.ok()) << store.status();
  WriteFile(path, absl::StrCat("sha256:", Sha256Hex("k2"), "\nsha256:", Sha256Hex("k3"), "\n"));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!(*store)->Check("Bearer k2").ok() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE((*store)->Check("Bearer k2").ok());
  EXPECT_FALSE((*store)->Check("Bearer k1").ok());
  std::filesystem::remove(path);
}

TEST(ApiKeyStoreTest, MissingOrBadFileRefusedAtOpen) {
  EXPECT_EQ(ApiKeyStore::Open("/nonexistent/keys").status().code(), absl::StatusCode::kNotFound);
  const auto path = TempFile("bad");
  WriteFile(path, "sha256:xyz\n");
  EXPECT_THAT(ApiKeyStore::Open(path.string()).status().message(), HasSubstr("line 1"));
  std::filesystem::remove(path);
}

TEST(ReadSecretFileTest, TrimsAndRefusesEmpty) {
  const auto path = TempFile("secret");
  WriteFile(path, "  s3cret\n");
  EXPECT_EQ(*ReadSecretFile(path.string()), "s3cret");
  WriteFile(path, "\n");
  EXPECT_FALSE(ReadSecretFile(path.string()).ok());
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace tessera::auth
