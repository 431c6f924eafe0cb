// An interactive rank's terminal (supervise/terminal.h): the scrollback's offsets, and a real
// pseudo-terminal pair.
#include "supervise/terminal.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <string>

namespace berth {
namespace {

TEST(Scrollback, GivesWhatItHoldsFromAnOffset) {
  Scrollback ring(16);
  int64_t from = -1;
  EXPECT_EQ(ring.Since(0, &from), "");
  EXPECT_EQ(from, 0);
  ring.Append("hello ");
  ring.Append("world\n");
  EXPECT_EQ(ring.total(), 12);
  EXPECT_EQ(ring.Since(0, &from), "hello world\n");
  EXPECT_EQ(from, 0);
  EXPECT_EQ(ring.Since(6, &from), "world\n");
  EXPECT_EQ(from, 6);
  EXPECT_EQ(ring.Since(12, &from), "");
  EXPECT_EQ(from, 12);
  EXPECT_EQ(ring.Since(99, &from), "") << "an offset past the end is the end";
  EXPECT_EQ(from, 12);
}

TEST(Scrollback, WhatItDroppedIsSkippedToALineStart) {
  Scrollback ring(16);
  ring.Append("line one\n");       // 0..9
  ring.Append("line two\nthree");  // 9..23: the ring holds the last 16 bytes, from 7
  int64_t from = -1;
  EXPECT_EQ(ring.Since(0, &from), "line two\nthree");
  EXPECT_EQ(from, 9) << "from the first line start the ring holds";
  EXPECT_EQ(ring.Since(8, &from), "\nline two\nthree");
  EXPECT_EQ(from, 8) << "held bytes are given from the offset asked for";
  // No line start in what is held: from its first byte.
  Scrollback ring2(4);
  ring2.Append("abcdefgh");
  EXPECT_EQ(ring2.Since(0, &from), "efgh");
  EXPECT_EQ(from, 4);
  // Many small appends stay within twice the capacity and keep the newest bytes.
  Scrollback ring3(8);
  for (int i = 0; i < 1000; ++i) ring3.Append(std::string(1, static_cast<char>('a' + i % 26)));
  EXPECT_EQ(ring3.total(), 1000);
  EXPECT_EQ(ring3.Since(992, &from), "efghijkl");
}

TEST(TermFrames, RoundTripAndRefusals) {
  std::string wire;
  AppendTermFrame(&wire, TermChannel::kStdin, "ls\n");
  AppendTermFrame(&wire, TermChannel::kControl, R"({"resize":[40,120]})");
  AppendTermFrame(&wire, TermChannel::kOutput, "");
  size_t used = 0;
  auto partial = TakeTermFrame(std::string_view(wire).substr(0, 7), &used);
  ASSERT_TRUE(partial.ok());
  EXPECT_FALSE(partial->has_value());
  auto first = TakeTermFrame(wire, &used);
  ASSERT_TRUE(first.ok() && first->has_value());
  EXPECT_EQ((*first)->channel, TermChannel::kStdin);
  EXPECT_EQ((*first)->payload, "ls\n");
  EXPECT_EQ(used, 8u);
  auto second = TakeTermFrame(std::string_view(wire).substr(8), &used);
  ASSERT_TRUE(second.ok() && second->has_value());
  EXPECT_EQ((*second)->channel, TermChannel::kControl);
  auto third = TakeTermFrame(std::string_view(wire).substr(8 + used), &used);
  ASSERT_TRUE(third.ok() && third->has_value());
  EXPECT_EQ((*third)->channel, TermChannel::kOutput);
  EXPECT_EQ((*third)->payload, "");
  EXPECT_FALSE(TakeTermFrame(std::string("\x02\0\0\0\0", 5), &used).ok()) << "channel 2";
  EXPECT_FALSE(TakeTermFrame(std::string("\x00\x00\x01\x00\x01", 5), &used).ok()) << "over 64 KiB";
}

TEST(Pty, APairOfTheSizeAskedForCarriesBytesAndResizes) {
  auto pty = OpenPty(33, 101);
  ASSERT_TRUE(pty.ok()) << pty.status().message();
  winsize size{};
  ASSERT_EQ(::ioctl(pty->slave, TIOCGWINSZ, &size), 0);
  EXPECT_EQ(size.ws_row, 33);
  EXPECT_EQ(size.ws_col, 101);
  ASSERT_TRUE(ResizePty(pty->master, 50, 200).ok());
  ASSERT_EQ(::ioctl(pty->slave, TIOCGWINSZ, &size), 0);
  EXPECT_EQ(size.ws_row, 50);
  EXPECT_EQ(size.ws_col, 200);
  ASSERT_EQ(::write(pty->slave, "hi\n", 3), 3);
  pollfd p{pty->master, POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 5000), 1);
  char buf[16];
  ssize_t n = ::read(pty->master, buf, sizeof(buf));
  EXPECT_EQ(std::string(buf, n > 0 ? static_cast<size_t>(n) : 0), "hi\r\n");
  // The master does not block: nothing more to read is EAGAIN.
  EXPECT_LT(::read(pty->master, buf, sizeof(buf)), 0);
  EXPECT_EQ(errno, EAGAIN);
  ::close(pty->slave);
  ::close(pty->master);
}

}  // namespace
}  // namespace berth
