// The JSON form of a spec is what the server stores: a spec must come back from it exactly, and a
// hand-written or stale JSON spec must be refused with a message naming the field.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "spec/job_spec.h"

namespace berth {
namespace {

namespace json = boost::json;
using ::testing::HasSubstr;

JobSpec FullSpec() {
  JobSpec s;
  s.name = "train";
  s.num_nodes = 2;
  s.resources = {.cpus = 1250, .memory = 1536, .gpu_type = "V100", .gpu_milli = 4000};
  s.envs = {{"LR", "0.01"}, {"A", "1"}, {"EMPTY", ""}};  // not sorted: order is kept
  s.workdir = "/home/me/proj";
  s.setup = "pip install -r requirements.txt\n";
  s.run = "python train.py --lr $LR\n";
  s.priority = -7;
  s.pool = "research";
  s.node_selector = {{"gpu_gen", "hopper"}, {"zone", "b"}};
  s.exclusive = "rack";
  s.time_limit = 90 * 60'000 + 500;  // not whole seconds: goes out as a fraction
  s.kill_grace = 30'000;
  s.on_preemption = RecoveryAction::kFail;
  s.on_node_lost = RecoveryAction::kRequeue;
  return s;
}

Result<JobSpec> SpecFromText(const std::string& text) { return SpecFromJson(json::parse(text)); }

std::string SpecErrorOf(const std::string& text) {
  auto r = SpecFromText(text);
  EXPECT_FALSE(r.ok()) << text;
  return r.ok() ? "" : r.status().message();
}

TEST(SpecJson, InteractiveRoundTripsAndIsAbsentWhenFalse) {
  JobSpec s;
  s.run = "bash";
  EXPECT_FALSE(SpecToJson(s).as_object().contains("interactive"))
      << "a batch job's spec reads as before";
  s.interactive = true;
  auto back = SpecFromText(json::serialize(SpecToJson(s)));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_TRUE(back->interactive);
  EXPECT_FALSE(SpecFromText(R"({"run":"bash","interactive":"yes"})").ok());
}

TEST(SpecJson, PlacementTopologyRoundTrips) {
  JobSpec s;
  s.run = "x";
  s.topology_required = "rack";
  s.topology_preferred = "switch";
  json::value v = SpecToJson(s);
  EXPECT_EQ(json::serialize(v.at("placement")),
            R"({"topology":{"required":"rack","preferred":"switch"}})");
  auto back = SpecFromJson(v);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->topology_required, "rack");
  EXPECT_EQ(back->topology_preferred, "switch");
  EXPECT_NE(
      SpecErrorOf(R"({"run":"x","placement":{"topology":{"rack":1}}})").find("placement.topology"),
      std::string::npos);
}

TEST(SpecJson, ShapeIsTheDocumentedOne) {
  json::value v = SpecToJson(FullSpec());
  EXPECT_EQ(json::serialize(v.at("resources")),
            R"({"accelerators":{"V100":4},"cpus":1.25E0,"memory":1.5E0})");
  EXPECT_EQ(json::serialize(v.at("envs")), R"({"LR":"0.01","A":"1","EMPTY":""})");
  EXPECT_EQ(json::serialize(v.at("placement")), R"({"exclusive":"rack"})");
  EXPECT_EQ(v.at("time_limit_s").as_double(), 5400.5);
  EXPECT_EQ(v.at("kill_grace_s").as_int64(), 30);
  EXPECT_EQ(json::serialize(v.at("recovery")),
            R"({"on_preemption":"fail","on_node_lost":"requeue","on_node_fault":"requeue"})");

  // A default spec: half a CPU, no GPU, nothing optional set.
  json::value d = SpecToJson(JobSpec{});
  EXPECT_EQ(json::serialize(d.at("resources")), R"({"accelerators":null,"cpus":5E-1,"memory":0})");
  EXPECT_TRUE(d.at("placement").is_null());
  EXPECT_TRUE(d.at("time_limit_s").is_null());
  EXPECT_TRUE(d.at("kill_grace_s").is_null());
}

// Through text and back, as the server stores it: nothing is lost or rounded differently.
TEST(SpecJson, RoundTripIsExact) {
  JobSpec half_gpu;
  half_gpu.resources = {.cpus = 1, .memory = 1, .gpu_type = "T4", .gpu_milli = 500};
  JobSpec big;
  big.resources = {
      .cpus = kMaxCpus, .memory = kMaxMemory, .gpu_type = "H100", .gpu_milli = kMaxGpus};
  big.time_limit = kMaxTimeLimit - 1;
  for (const JobSpec& s : {FullSpec(), JobSpec{}, half_gpu, big}) {
    auto back = SpecFromText(json::serialize(SpecToJson(s)));
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(*back, s);
  }
}

TEST(SpecJson, MissingFieldsTakeTheDefaults) {
  auto s = SpecFromText(R"({"run": "echo hi", "resources": {"accelerators": {"A100": 2}}})");
  ASSERT_TRUE(s.ok()) << s.status().message();
  JobSpec want;
  want.run = "echo hi";
  want.resources.gpu_type = "A100";
  want.resources.gpu_milli = 2000;
  EXPECT_EQ(*s, want);
}

TEST(SpecJson, UnknownFieldsAndWrongTypesNameTheField) {
  EXPECT_EQ(SpecErrorOf(R"({"nmae": "x"})"), "unknown field 'nmae'");
  EXPECT_EQ(SpecErrorOf(R"({"resources": {"gpus": 2}})"), "resources: unknown field 'gpus'");
  EXPECT_EQ(SpecErrorOf(R"({"recovery": {"on_preempt": "fail"}})"),
            "recovery: unknown field 'on_preempt'");
  EXPECT_EQ(SpecErrorOf(R"({"num_nodes": "2"})"),
            "num_nodes: expected a whole number, got a string");
  EXPECT_EQ(SpecErrorOf(R"({"num_nodes": 1.5})"),
            "num_nodes: expected a whole number, got a number");
  EXPECT_EQ(SpecErrorOf(R"({"resources": {"cpus": "8"}})"),
            "resources.cpus: expected a number, got a string");
  EXPECT_EQ(SpecErrorOf(R"({"envs": {"LR": 0.1}})"), "envs.LR: expected a string, got a number");
  EXPECT_EQ(SpecErrorOf(R"({"envs": [["LR", "1"]]})"), "envs: expected an object, got a list");
  EXPECT_EQ(SpecErrorOf(R"({"recovery": {"on_node_fault": "again"}})"),
            "recovery.on_node_fault: expected \"requeue\" or \"fail\", got \"again\"");
  EXPECT_EQ(SpecErrorOf(R"({"recovery": {"on_node_lost": "retry"}})"),
            "recovery.on_node_lost: expected \"requeue\" or \"fail\", got \"retry\"");
  EXPECT_EQ(SpecErrorOf(R"({"resources": {"accelerators": {"V100": 1, "A100": 1}}})"),
            "resources.accelerators: name exactly one accelerator type, as {\"V100\": 4}");
  EXPECT_EQ(SpecErrorOf(R"([1, 2])"), "spec: expected an object, got a list");
}

// JSON skips the YAML parser, so ValidateSpec is what stands between a bad request and the
// scheduler.
TEST(SpecJson, IsValidated) {
  EXPECT_THAT(SpecErrorOf(R"({"resources": {"cpus": 0}})"),
              HasSubstr("resources.cpus must be positive"));
  EXPECT_THAT(SpecErrorOf(R"({"resources": {"accelerators": {"V100": 1.5}}})"),
              HasSubstr("more than one GPU must be a whole number"));
  EXPECT_THAT(SpecErrorOf(R"({"envs": {"BERTH_JOB_ID": "1"}})"),
              HasSubstr("envs.BERTH_JOB_ID is reserved"));
  EXPECT_THAT(SpecErrorOf(R"({"time_limit_s": 0})"), HasSubstr("time_limit must be positive"));
  EXPECT_THAT(SpecErrorOf(R"({"kill_grace_s": 7200})"), HasSubstr("kill_grace must be at most 1h"));
}

}  // namespace
}  // namespace berth

namespace berth {
namespace {

TEST(SpecJson, ContainerRoundTripsAndIsChecked) {
  JobSpec s;
  s.container = ContainerSpec{.image = "localhost:5000/bb:1",
                              .mounts = {"/data:/data:ro"},
                              .pull = PullPolicy::kNever,
                              .remap_root = true};
  auto back = SpecFromText(json::serialize(SpecToJson(s)));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(*back, s);
  EXPECT_THAT(SpecErrorOf(R"({"container": {"mounts": []}})"),
              HasSubstr("container: image is missing"));
  EXPECT_THAT(SpecErrorOf(R"({"container": {"image": "x", "pull": "later"}})"),
              HasSubstr("container.pull: expected missing, always or never"));
  EXPECT_THAT(SpecErrorOf(R"({"container": {"image": "x y"}})"),
              HasSubstr("resources.image_id: 'x y' is not an image reference"));
  EXPECT_THAT(SpecErrorOf(R"({"container": {"image": "x", "mounts": ["/a:/b:rx"]}})"),
              HasSubstr("container.mounts: '/a:/b:rx'"));
  EXPECT_THAT(SpecErrorOf(R"({"container": {"image": "x@sha256:abc"}})"),
              HasSubstr("is not an image reference"));
}

}  // namespace
}  // namespace berth
