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

}  // namespace
}  // namespace berth
