// How berth's command line is read around CLI11 (cli/arguments.h): a command's own arguments are
// never berth's options, and usage errors are said one way with the nearest known name.
#include "cli/arguments.h"

#include <gtest/gtest.h>

namespace berth::cli {
namespace {

using Args = std::vector<std::string>;

class ArgumentsTest : public ::testing::Test {
 protected:
  ArgumentsTest() {
    exec_ = app_.add_subcommand("exec", "");
    exec_->add_option("args", args_, "");
    exec_->add_flag("-d,--detach", detach_, "");
    exec_->add_option("-n,--name", name_, "");
    exec_->add_option("--gpus", name_, "");
    exec_->add_flag("-i,-t,--interactive", detach_, "");
    auto* admin = app_.add_subcommand("admin", "");
    admin->require_subcommand(1);
    admin->add_subcommand("node", "");
    app_.add_subcommand("queue", "");
    app_.require_subcommand(1);
  }
  CLI::App app_;
  CLI::App* exec_ = nullptr;
  Args args_;
  bool detach_ = false;
  std::string name_;
};

// `berth exec python3 train.py -n 3` named the job "3", and the script never got `-n 3`.
TEST_F(ArgumentsTest, TheCommandBeginsAtItsFirstWord) {
  EXPECT_EQ(MarkExecCommand(*exec_, {"python3", "train.py", "-n", "3"}),
            (Args{"--", "python3", "train.py", "-n", "3"}));
  EXPECT_EQ(
      MarkExecCommand(*exec_, {"-d", "-n", "job", "--gpus", "V100:1", "python3", "--lr", "1"}),
      (Args{"-d", "-n", "job", "--gpus", "V100:1", "--", "python3", "--lr", "1"}));
  EXPECT_EQ(MarkExecCommand(*exec_, {"--name=x", "-it", "bash"}),
            (Args{"--name=x", "-it", "--", "bash"}));
  // A task file may be followed by berth's options; an explicit "--" is left as it is.
  EXPECT_EQ(MarkExecCommand(*exec_, {"task.yaml", "-d", "-n", "x"}),
            (Args{"task.yaml", "-d", "-n", "x"}));
  EXPECT_EQ(MarkExecCommand(*exec_, {"-d", "--", "echo", "-n", "hi"}),
            (Args{"-d", "--", "echo", "-n", "hi"}));
  EXPECT_EQ(MarkExecCommand(*exec_, {"-d"}), (Args{"-d"}));
}

TEST_F(ArgumentsTest, NearestNamesAMisspelling) {
  EXPECT_EQ(Nearest("queu", {"queue", "exec", "cancel"}), "queue");
  EXPECT_EQ(Nearest("--gpu", {"--gpus", "--cpus", "--name"}), "--gpus");
  EXPECT_EQ(Nearest("canc", {"queue", "cancel"}), "cancel");
  EXPECT_EQ(Nearest("frobnicate", {"queue", "cancel"}), "");
}

// Usage errors exited 104, 106 or 109 with CLI11's words ("A subcommand is required"); they exit 2
// naming what was wrong and the nearest known name.
TEST_F(ArgumentsTest, UsageErrorsExitTwo) {
  auto fail = [&](Args args) {
    try {
      std::vector<std::string> reversed(args.rbegin(), args.rend());
      app_.parse(reversed);
    } catch (const CLI::ParseError& e) {
      return ParseFailure(app_, args, e);
    }
    return 0;
  };
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(fail({"queu"}), 2);
  EXPECT_EQ(fail({"admin", "nod"}), 2);
  EXPECT_EQ(fail({"exec", "--gpu", "V100:1", "--", "echo", "hi"}), 2);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("berth: unknown command 'queu' (did you mean queue?)"), std::string::npos)
      << err;
  EXPECT_NE(err.find("berth admin: unknown command 'nod' (did you mean node?)"), std::string::npos)
      << err;
  EXPECT_NE(err.find("berth exec: unknown option --gpu (did you mean --gpus?)"), std::string::npos)
      << err;
}

}  // namespace
}  // namespace berth::cli
