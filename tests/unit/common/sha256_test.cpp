// SHA-256 (common/sha256.h): the one digest helper, against the standard's test vectors, and the
// same digest whether the bytes come at once or in pieces.
#include "common/sha256.h"

#include <gtest/gtest.h>

namespace berth {
namespace {

TEST(Sha256Test, KnownVectorsAndPiecesAgree) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  Sha256 h;
  h.Update("a");
  h.Update("");
  h.Update("bc");
  EXPECT_EQ(h.Finish(), Sha256Hex("abc"));
}

// RFC 4231's test cases 1 and 2 (what signs a webhook, docs/notifications.md).
TEST(Sha256Test, HmacMatchesRfc4231) {
  EXPECT_EQ(HmacSha256Hex(std::string(20, '\x0b'), "Hi There"),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(HmacSha256Hex("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

}  // namespace
}  // namespace berth
