#include "src/runtime/sha256.h"

#include <random>
#include <string>

#include "gtest/gtest.h"

namespace reprise::runtime {
namespace {

std::string HexOf(absl::string_view message) { return ToHex(Sha256(message)); }

// FIPS 180-4 examples (NIST CSRC "SHA256.pdf" and "SHA2_Additional.pdf").
TEST(Sha256Test, EmptyMessage) {
  EXPECT_EQ(HexOf(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(Sha256Test, Abc) {
  EXPECT_EQ(HexOf("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Sha256Test, TwoBlockMessageOf448Bits) {
  EXPECT_EQ(HexOf("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256Test, MessageOf896Bits) {
  EXPECT_EQ(HexOf("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopq"
                  "klmnopqrlmnopqrsmnopqrstnopqrstu"),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}

TEST(Sha256Test, OneMillionLetterA) {
  EXPECT_EQ(HexOf(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Lengths around the padding boundary (55/56 bytes need one or two final blocks); expected values
// from Python's hashlib.
TEST(Sha256Test, PaddingBoundaryLengths) {
  EXPECT_EQ(HexOf(std::string(55, 'a')),
            "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
  EXPECT_EQ(HexOf(std::string(56, 'a')),
            "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
  EXPECT_EQ(HexOf(std::string(63, 'a')),
            "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34");
  EXPECT_EQ(HexOf(std::string(64, 'a')),
            "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
  EXPECT_EQ(HexOf(std::string(65, 'a')),
            "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0");
}

TEST(Sha256Test, IncrementalUpdatesInRandomPiecesMatchOneShot) {
  std::mt19937 rng(7);
  std::string message(5000, '\0');
  for (char& c : message) c = static_cast<char>(rng());
  const Sha256Digest expected = Sha256(message);
  for (int trial = 0; trial < 20; ++trial) {
    Sha256Hasher hasher;
    size_t at = 0;
    while (at < message.size()) {
      const size_t piece = std::min<size_t>(rng() % 150, message.size() - at);
      hasher.Update(absl::string_view(message).substr(at, piece));
      at += piece;
    }
    EXPECT_EQ(hasher.Finish(), expected) << "trial " << trial;
  }
}

TEST(Sha256Test, ResetStartsAFreshMessage) {
  Sha256Hasher hasher;
  hasher.Update("something else");
  (void)hasher.Finish();
  hasher.Reset();
  hasher.Update("abc");
  EXPECT_EQ(ToHex(hasher.Finish()), HexOf("abc"));
}

TEST(Sha256Test, ToHexIsLowerCaseTwoDigitsPerByte) {
  const uint8_t bytes[] = {0x00, 0x0f, 0xa0, 0xff};
  EXPECT_EQ(ToHex(bytes), "000fa0ff");
  EXPECT_EQ(ToHex({}), "");
}

}  // namespace
}  // namespace reprise::runtime
