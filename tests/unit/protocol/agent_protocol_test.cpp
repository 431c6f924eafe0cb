// The agent protocol as typed messages. Each message must come back from its own JSON unchanged,
// encode to the bytes the server and agents exchange today (so that old peers keep working), and
// refuse a malformed peer with a message that names the field instead of crashing.
#include "protocol/agent_protocol.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/json_util.h"

namespace berth::proto {
namespace {

using ::testing::HasSubstr;

json::value Parse(std::string_view text) {
  auto v = ParseJson(text, "test");
  EXPECT_TRUE(v.ok()) << text;
  return v.ok() ? *v : json::value();
}

// Encodes `m` to text and decodes it back, as a peer would.
template <typename T>
T RoundTrip(const T& m) {
  std::string wire = SerializeJson(m.Encode());
  auto back = T::Decode(Parse(wire));
  EXPECT_TRUE(back.ok()) << wire << ": " << back.status().message();
  return back.ok() ? *back : T{};
}

template <typename T>
std::string ErrorOf(const Result<T>& r) {
  EXPECT_FALSE(r.ok());
  return r.ok() ? "(no error)" : r.status().message();
}

// --- register --------------------------------------------------------------------------------

RegisterRequest FullRegister() {
  RegisterRequest r;
  r.name = "gpu-07";
  r.node_id = "0123456789abcdef";
  r.address = "10.0.0.7";
  r.pool = "research";
  r.labels = {{"rack", "r12"}, {"zone", "b"}};
  r.cpus_milli = 64'000;
  r.memory_mib = 512 * 1024;
  r.gpus = {{0, "H100"}, {1, "H100"}};
  r.running = {{42, 3, 1}, {43, 1, 0}};
  r.isolation = "v1";
  r.sharing = "mps";
  r.mig_reconfigure = true;
  r.mig_error = "GPU 0: busy";
  r.job_memory_default_mib = 4096;
  return r;
}

TEST(Register, RequestRoundTripsInTheAgentsFieldOrder) {
  RegisterRequest r = FullRegister();
  EXPECT_EQ(RoundTrip(r), r);
  EXPECT_EQ(SerializeJson(r.Encode()),
            R"({"name":"gpu-07","node_id":"0123456789abcdef","address":"10.0.0.7",)"
            R"("pool":"research","labels":{"rack":"r12","zone":"b"},"cpus_milli":64000,)"
            R"("memory_mib":524288,"gpus":[{"index":0,"type":"H100"},{"index":1,"type":"H100"}],)"
            R"("running":[{"job":42,"attempt":3,"rank":1},{"job":43,"attempt":1,"rank":0}],)"
            R"("isolation":"v1","sharing":"mps","mig_reconfigure":true,"mig_error":"GPU 0: busy",)"
            R"("job_memory_default_mib":4096})");
}

TEST(Register, AMigSliceNamesItsGpu) {
  RegisterRequest r = FullRegister();
  r.gpus = {{1, "A100"}, {100, "A100-3g.40gb", 0}};
  EXPECT_EQ(RoundTrip(r), r);
  EXPECT_NE(SerializeJson(r.Encode())
                .find(R"("gpus":[{"index":1,"type":"A100"},)"
                      R"({"index":100,"type":"A100-3g.40gb","parent":0}])"),
            std::string::npos);
  EXPECT_EQ(ErrorOf(RegisterRequest::Decode(
                Parse(R"({"name": "n", "node_id": "0123456789", "cpus_milli": 1000,)"
                      R"( "gpus": [{"index": 100, "type": "A100-3g.40gb", "parent": -2}]})"))),
            "register: each GPU needs an index and a type");
}

TEST(Register, TheIntegrationTestsFakeAgentRegisters) {
  // tests/integration/test_dispatch.py speaks the protocol by hand.
  auto r = RegisterRequest::Decode(Parse(
      R"({"name": "fake", "node_id": "fake-node-identity", "address": "", "pool": "",)"
      R"( "labels": {}, "cpus_milli": 4000, "memory_mib": 1024, "gpus": [], "running": []})"));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->name, "fake");
  EXPECT_EQ(r->cpus_milli, 4000);
  EXPECT_TRUE(r->gpus.empty());
}

TEST(Register, RefusesWithTheServersMessages) {
  auto decode = [](std::string_view text) { return ErrorOf(RegisterRequest::Decode(Parse(text))); };
  const std::string ok = R"("node_id": "0123456789", "cpus_milli": 1000)";
  EXPECT_EQ(decode("[]"), "register: body must be a JSON object");
  EXPECT_EQ(decode(R"({"name": 7})"), "register: 'name' must be a string");
  EXPECT_EQ(decode(R"({"name": "n", "node_id": "0123456789", "cpus_milli": "8"})"),
            "register: 'cpus_milli' must be an integer");
  EXPECT_EQ(decode(R"({"name": "-n", )" + ok + "}"), "register: invalid node name '-n'");
  EXPECT_EQ(decode(R"({"name": "n", "node_id": "short", "cpus_milli": 1000})"),
            "register: node_id is missing");
  EXPECT_EQ(decode(R"({"name": "n", "node_id": "0123456789"})"),
            "register: cpus must be positive and memory not negative");
  EXPECT_EQ(decode(R"({"name": "n", "memory_mib": -1, )" + ok + "}"),
            "register: cpus must be positive and memory not negative");
  EXPECT_EQ(decode(R"({"name": "n", "pool": "a b", )" + ok + "}"), "register: invalid pool name");
  EXPECT_EQ(decode(R"({"name": "n", "labels": {"zone": 1}, )" + ok + "}"),
            "register: labels must be name=value pairs of [A-Za-z0-9._-]");
  EXPECT_EQ(decode(R"({"name": "n", "labels": {"zone": "a b"}, )" + ok + "}"),
            "register: labels must be name=value pairs of [A-Za-z0-9._-]");
  EXPECT_EQ(decode(R"({"name": "n", "labels": ["zone"], )" + ok + "}"),
            "register: 'labels' must be an object");
  EXPECT_EQ(decode(R"({"name": "n", "gpus": [0], )" + ok + "}"), "register: gpus must be objects");
  EXPECT_EQ(decode(R"({"name": "n", "gpus": [{"type": "H100"}], )" + ok + "}"),
            "register: each GPU needs an index and a type");
  EXPECT_EQ(decode(R"({"name": "n", "gpus": [{"index": 0, "type": ""}], )" + ok + "}"),
            "register: each GPU needs an index and a type");
  EXPECT_EQ(decode(R"({"name": "n", "gpus": {}, )" + ok + "}"),
            "register: 'gpus' must be an array");
  EXPECT_EQ(
      decode(R"({"name": "n", "running": [{"job": 1, "attempt": "2", "rank": 0}], )" + ok + "}"),
      "register: each entry of 'running' needs an integer job, attempt and rank");
}

TEST(Register, ContainerMountsRoundTripAndAreChecked) {
  RegisterRequest r = FullRegister();
  r.container_mounts = {"/datasets", "/scratch/shared"};
  EXPECT_EQ(RoundTrip(r), r);
  auto decode = [](std::string_view text) { return ErrorOf(RegisterRequest::Decode(Parse(text))); };
  const std::string ok = R"("name": "n", "node_id": "0123456789", "cpus_milli": 1000)";
  const std::string message = "register: 'container_mounts' must be at most 64 absolute paths";
  EXPECT_EQ(decode("{" + ok + R"(, "container_mounts": ["data"]})"), message);
  EXPECT_EQ(decode("{" + ok + R"(, "container_mounts": "/data"})"), message);
  EXPECT_EQ(decode("{" + ok + R"(, "container_mounts": [7]})"), message);
}

TEST(Register, ValidateHoldsForHandBuiltRequests) {
  RegisterRequest r = FullRegister();
  EXPECT_TRUE(r.Validate().ok());
  r.gpus.push_back({-1, "H100"});
  EXPECT_EQ(r.Validate().message(), "register: each GPU needs an index and a type");
}

TEST(Register, AnswerRoundTripsAndFillsTheAgentsDefaults) {
  RegisterAnswer a{"c0ffee", 20'000, 5'000};
  EXPECT_EQ(RoundTrip(a), a);
  EXPECT_EQ(SerializeJson(a.Encode()),
            R"({"session":"c0ffee","lease_ms":20000,"heartbeat_ms":5000})");
  // An answer with only a session: a 30 s lease, renewed every quarter of it.
  auto bare = RegisterAnswer::Decode(Parse(R"({"session": "s"})"));
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(bare->lease_ms, 30'000);
  EXPECT_EQ(bare->heartbeat_ms, 7'500);
  EXPECT_EQ(ErrorOf(RegisterAnswer::Decode(Parse(R"({"lease_ms": 1000})"))),
            "register answer: 'session' is missing");
  EXPECT_EQ(ErrorOf(RegisterAnswer::Decode(Parse(R"({"session": "s", "heartbeat_ms": 0})"))),
            "register answer: 'heartbeat_ms' must be positive");
}

// --- watch stream ----------------------------------------------------------------------------

LaunchMessage GangLaunch() {
  LaunchMessage m;
  m.job = 42;
  m.attempt = 2;
  m.rank = 1;
  m.num_nodes = 2;
  m.spec_id = 9;
  m.name = "train";
  m.user = "ada";
  m.node_ips = {"10.0.0.1", "10.0.0.2"};
  m.gpus = {2, 3};
  m.gpus_per_node = 2;
  m.kill_grace_ms = 30'000;
  return m;
}

TEST(Watch, LaunchEncodesAsTheServerSendsIt) {
  // Byte for byte what Server::LaunchMessage has always written, so old agents read it.
  EXPECT_EQ(EncodeWatchLine(GangLaunch()),
            R"({"type":"launch","job":42,"attempt":2,"rank":1,"num_nodes":2,"spec_id":9,)"
            R"("name":"train","user":"ada","node_ips":["10.0.0.1","10.0.0.2"],"gpus":[2,3],)"
            R"("gpus_per_node":2,"kill_grace_ms":30000})"
            "\n");
  LaunchMessage bulk = GangLaunch();
  bulk.group = 5;
  bulk.group_rank = 3;
  bulk.num_jobs = 8;
  EXPECT_THAT(EncodeWatchLine(bulk),
              HasSubstr(R"("gpus_per_node":2,"group":5,"group_rank":3,"num_jobs":8,)"
                        R"("kill_grace_ms":30000})"));
}

TEST(Watch, EveryMessageComesBackFromItsLine) {
  LaunchMessage bulk = GangLaunch();
  bulk.group = 5;
  bulk.group_rank = 3;
  bulk.num_jobs = 8;
  bulk.idle_below = 20;  // its idle policy's threshold
  std::vector<WatchMessage> messages = {HelloMessage{},
                                        PingMessage{},
                                        GangLaunch(),
                                        bulk,
                                        StopMessage{42, 2, 1, "cancelled by ada"},
                                        SpecMessage{9, R"({"run":"echo \"hi\"\n"})"}};
  for (const auto& m : messages) {
    std::string line = EncodeWatchLine(m);
    ASSERT_EQ(line.back(), '\n');
    auto back = DecodeWatchMessage(line);
    ASSERT_TRUE(back.ok()) << line << ": " << back.status().message();
    EXPECT_EQ(*back, m) << line;
  }
  EXPECT_EQ(EncodeWatchLine(HelloMessage{}), "{\"type\":\"hello\"}\n");
  EXPECT_EQ(EncodeWatchLine(PingMessage{}), "{\"type\":\"ping\"}\n");
  EXPECT_EQ(EncodeWatchLine(StopMessage{42, 2, 1, "preempted"}),
            R"({"type":"stop","job":42,"attempt":2,"rank":1,"reason":"preempted"})"
            "\n");
}

TEST(Watch, ALaunchWithOnlyWhatIsRequiredGetsTheAgentsDefaults) {
  auto m = DecodeWatchMessage(R"({"type":"launch","job":1,"attempt":1,"rank":0,"spec_id":4})");
  ASSERT_TRUE(m.ok()) << m.status().message();
  const auto& launch = std::get<LaunchMessage>(*m);
  EXPECT_EQ(launch.num_nodes, 1);
  EXPECT_EQ(launch.gpus_per_node, 0);
  EXPECT_EQ(launch.kill_grace_ms, 10'000);
  EXPECT_FALSE(launch.group);
  EXPECT_TRUE(launch.gpus.empty());
}

TEST(Watch, ASpecMessageNeedsAnIdAboveZeroAndItsText) {
  EXPECT_EQ(EncodeWatchLine(SpecMessage{3, "{}"}), R"({"type":"spec","id":3,"text":"{}"})"
                                                   "\n");
  for (const char* bad : {R"({"type":"spec","id":0,"text":"{}"})", R"({"type":"spec","id":3})",
                          R"({"type":"spec","text":"{}"})", R"({"type":"spec","id":3,"text":7})"}) {
    auto m = DecodeWatchMessage(bad);
    ASSERT_FALSE(m.ok()) << bad;
    EXPECT_EQ(m.status().code(), berth::Code::kInvalidArgument) << bad;
  }
}

TEST(Watch, AForwardRoundTripsAndNeedsItsFields) {
  ForwardMessage m{"0123456789abcdef0123456789abcdef", 42, 2, 1, 8888};
  std::string line = EncodeWatchLine(m);
  EXPECT_EQ(line, R"({"type":"forward","sid":"0123456789abcdef0123456789abcdef","job":42,)"
                  R"("attempt":2,"rank":1,"port":8888})"
                  "\n");
  auto back = DecodeWatchMessage(line);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(std::get<ForwardMessage>(*back), m);
  for (const char* bad :
       {R"({"type":"forward","sid":"short","job":1,"attempt":1,"rank":0,"port":80})",
        R"({"type":"forward","sid":"0123456789abcdef","job":1,"attempt":1,"rank":0,"port":0})",
        R"({"type":"forward","sid":"0123456789abcdef","job":1,"attempt":1,"rank":0,"port":65536})",
        R"({"type":"forward","sid":"0123456789abcdef","job":1,"attempt":1,"rank":-1,"port":80})",
        R"({"type":"forward","sid":"0123456789abcdef","job":1,"attempt":1,"rank":0})"}) {
    auto decoded = DecodeWatchMessage(bad);
    ASSERT_FALSE(decoded.ok()) << bad;
    EXPECT_EQ(decoded.status().code(), berth::Code::kInvalidArgument) << bad;
  }
}

TEST(Watch, AnExecRoundTripsAndNeedsItsFields) {
  ExecMessage m{"0123456789abcdef0123456789abcdef", 42, 2, 1, "nvidia-smi\nls", true, 30, 100};
  auto back = DecodeWatchMessage(EncodeWatchLine(m));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(std::get<ExecMessage>(*back), m);
  // tty, rows and cols are optional.
  auto plain = DecodeWatchMessage(
      R"({"type":"exec","sid":"0123456789abcdef","job":1,"attempt":1,"rank":0,"command":"ls"})");
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_FALSE(std::get<ExecMessage>(*plain).tty);
  EXPECT_EQ(std::get<ExecMessage>(*plain).rows, 24);
  for (const char* bad :
       {R"({"type":"exec","sid":"0123456789abcdef","job":1,"attempt":1,"rank":0,"command":""})",
        R"({"type":"exec","sid":"0123456789abcdef","job":1,"attempt":1,"rank":0})",
        R"({"type":"exec","sid":"0123456789abcdef","job":1,"attempt":1,"rank":0,"command":"x",)"
        R"("rows":0})",
        R"({"type":"exec","sid":"short","job":1,"attempt":1,"rank":0,"command":"x"})"}) {
    auto decoded = DecodeWatchMessage(bad);
    ASSERT_FALSE(decoded.ok()) << bad;
    EXPECT_EQ(decoded.status().code(), berth::Code::kInvalidArgument) << bad;
  }
}

TEST(Watch, ASessionRoundTripsAndNeedsItsFields) {
  SessionMessage m{"0123456789abcdef0123456789abcdef", 42, 2, 1, 1234};
  std::string line = EncodeWatchLine(m);
  EXPECT_EQ(line, R"({"type":"session","sid":"0123456789abcdef0123456789abcdef","job":42,)"
                  R"("attempt":2,"rank":1,"offset":1234})"
                  "\n");
  auto back = DecodeWatchMessage(line);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(std::get<SessionMessage>(*back), m);
  for (
      const char* bad :
      {R"({"type":"session","sid":"short","job":1,"attempt":1,"rank":0,"offset":0})",
       R"({"type":"session","sid":"0123456789abcdef/../x","job":1,"attempt":1,"rank":0,"offset":0})",
       R"({"type":"session","sid":"0123456789abcdef","job":0,"attempt":1,"rank":0,"offset":0})",
       R"({"type":"session","sid":"0123456789abcdef","job":1,"attempt":1,"rank":0,"offset":-1})",
       R"({"type":"session","sid":"0123456789abcdef","job":1,"attempt":1,"rank":0})"}) {
    auto decoded = DecodeWatchMessage(bad);
    EXPECT_FALSE(decoded.ok()) << bad;
  }
}

TEST(Watch, AStopWithTheRankLastDecodesToo) {
  // Server::StopRanks adds "rank" after "reason": order does not matter.
  auto m =
      DecodeWatchMessage(R"({"type":"stop","job":7,"attempt":1,"reason":"time limit","rank":0})"
                         "\r\n");
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(std::get<StopMessage>(*m), (StopMessage{7, 1, 0, "time limit"}));
}

TEST(Watch, BadLaunchesNameTheField) {
  auto error = [](std::string_view line) { return ErrorOf(DecodeWatchMessage(line)); };
  EXPECT_EQ(error(R"({"type":"launch","job":1,"attempt":"1","rank":0,"spec_id":4})"),
            "launch: 'attempt' must be an integer");
  EXPECT_EQ(error(R"({"type":"launch","attempt":1,"rank":0,"spec_id":4})"),
            "launch: 'job' is missing");
  EXPECT_EQ(error(R"({"type":"launch","job":1,"attempt":1,"rank":0})"),
            "launch: 'spec_id' is missing");
  EXPECT_EQ(error(R"({"type":"launch","job":1,"attempt":1,"rank":4294967296,"spec_id":4})"),
            "launch: 'rank' is out of range");
  EXPECT_EQ(error(R"({"type":"launch","job":1,"attempt":1,"rank":2,"num_nodes":2,"spec_id":4})"),
            "launch: 'rank' must be in [0, num_nodes)");
  EXPECT_EQ(error(R"({"type":"launch","job":1,"attempt":1,"rank":0,"spec_id":4,"gpus":["0"]})"),
            "launch: 'gpus' must hold device indices (integers >= 0)");
  EXPECT_EQ(error(R"({"type":"launch","job":1,"attempt":1,"rank":0,"spec_id":4,"node_ips":[1]})"),
            "launch: 'node_ips' must hold strings");
  EXPECT_EQ(error(R"({"type":"launch","job":1,"attempt":1,"rank":0,"spec_id":4,"group":3,)"
                  R"("group_rank":0})"),
            "launch: 'num_jobs' is missing");
  EXPECT_EQ(error(R"({"type":"stop","job":1,"attempt":1})"), "stop: 'rank' is missing");
}

TEST(Watch, AnUnknownTypeIsAnErrorCallersMaySkip) {
  // A newer server may send messages an older agent does not know: NotFound, not InvalidArgument.
  auto m = DecodeWatchMessage(R"({"type":"drain","deadline_ms":1000})");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Code::kNotFound);
  EXPECT_EQ(m.status().message(), "watch: unknown message type 'drain'");
}

TEST(Watch, MalformedLinesAreInvalid) {
  for (std::string_view line : {"{\"type\":", "[1,2]", "{}", "{\"type\":3}"}) {
    auto m = DecodeWatchMessage(line);
    ASSERT_FALSE(m.ok()) << line;
    EXPECT_EQ(m.status().code(), Code::kInvalidArgument) << line;
  }
  EXPECT_EQ(ErrorOf(DecodeWatchMessage("{}")), "watch: 'type' is missing");
  EXPECT_EQ(ErrorOf(DecodeWatchMessage("[1]")), "watch: message must be a JSON object");
}

// --- heartbeat -------------------------------------------------------------------------------

TEST(Heartbeat, RoundTrips) {
  HeartbeatRequest r{"gpu-07", "c0ffee"};
  EXPECT_EQ(RoundTrip(r), r);
  EXPECT_EQ(SerializeJson(r.Encode()), R"({"node":"gpu-07","session":"c0ffee"})");
  HeartbeatAnswer a{true, 30'000};
  EXPECT_EQ(RoundTrip(a), a);
  EXPECT_EQ(SerializeJson(a.Encode()), R"({"ok":true,"lease_ms":30000})");
  EXPECT_EQ(ErrorOf(HeartbeatRequest::Decode(Parse(R"({"node":"n","session":1})"))),
            "heartbeat: 'session' must be a string");
  // Missing credentials are left to the server's session check (409 "register again").
  auto bare = HeartbeatRequest::Decode(Parse("{}"));
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(bare->session, "");
}

TEST(Heartbeat, CarriesWhatEachRanksGpusDid) {
  HeartbeatRequest r{"gpu-07", "c0ffee"};
  r.gpu_usage.push_back({.id = {42, 1, 0},
                         .known = true,
                         .samples = 30,
                         .mean_sm_tenths = 12,
                         .p95_sm = 3,
                         .peak_memory_mib = 40'231,
                         .idle_ms = 290'000,
                         .idle_for_ms = 290'000});
  EXPECT_EQ(RoundTrip(r), r);
  EXPECT_EQ(SerializeJson(r.Encode()),
            R"({"node":"gpu-07","session":"c0ffee","gpu_usage":[{"job":42,"attempt":1,"rank":0,)"
            R"("known":true,"samples":30,"mean_sm_tenths":12,"p95_sm":3,"peak_memory_mib":40231,)"
            R"("idle_ms":290000,"idle_for_ms":290000}]})");
  EXPECT_EQ(ErrorOf(HeartbeatRequest::Decode(Parse(R"({"gpu_usage":{}})"))),
            "heartbeat: 'gpu_usage' must be an array");
  EXPECT_EQ(ErrorOf(HeartbeatRequest::Decode(Parse(R"({"gpu_usage":[{"attempt":1,"rank":0}]})"))),
            "heartbeat: gpu_usage: 'job' is missing");
  EXPECT_EQ(ErrorOf(HeartbeatRequest::Decode(
                Parse(R"({"gpu_usage":[{"job":1,"attempt":1,"rank":0,"p95_sm":101}]})"))),
            "heartbeat: gpu_usage: a value out of range (job 1)");
}

TEST(Heartbeat, CarriesEachGpuAsItsLastSampleSawIt) {
  HeartbeatRequest r{"gpu-07", "c0ffee"};
  r.gpus_now = {{.index = 0, .sm = 97, .memory_mib = 40'000}, {.index = 1, .sm = 0}};
  EXPECT_EQ(RoundTrip(r), r);
  EXPECT_EQ(SerializeJson(r.Encode()),
            R"({"node":"gpu-07","session":"c0ffee","gpus_now":[{"index":0,"sm":97,)"
            R"("memory_mib":40000},{"index":1,"sm":0,"memory_mib":0}]})");
  EXPECT_EQ(ErrorOf(HeartbeatRequest::Decode(Parse(R"({"gpus_now":[{"index":0,"sm":140}]})"))),
            "heartbeat: gpus_now: a value out of range (GPU 0)");
  EXPECT_EQ(ErrorOf(HeartbeatRequest::Decode(Parse(R"({"gpus_now":7})"))),
            "heartbeat: 'gpus_now' must be an array of at most 1024 GPUs");
}

// --- reports ---------------------------------------------------------------------------------

TEST(Reports, EveryEventRoundTrips) {
  Report accepted{42, 2, 1, ReportEvent::kAccepted};
  Report setting_up{42, 2, 1, ReportEvent::kSettingUp};
  Report running{42, 2, 1, ReportEvent::kRunning};
  Report failed{42, 2, 1, ReportEvent::kExited, 3, "setup", "pip failed"};
  Report never_ran{42, 2, 1, ReportEvent::kExited, std::nullopt, "run", "was not running"};
  Report measured{42, 2, 1, ReportEvent::kExited, 0, "run", "", 3'000'000'000, 1500};
  for (const Report& r : {accepted, setting_up, running, failed, never_ran, measured}) {
    EXPECT_EQ(RoundTrip(r), r) << SerializeJson(r.Encode());
  }
  // What the agent sends today: the exit's details only with "exited", and null for no code.
  EXPECT_EQ(SerializeJson(accepted.Encode()),
            R"({"job":42,"attempt":2,"rank":1,"event":"accepted"})");
  EXPECT_EQ(SerializeJson(never_ran.Encode()),
            R"({"job":42,"attempt":2,"rank":1,"event":"exited","exit_code":null,"phase":"run",)"
            R"("reason":"was not running"})");
  EXPECT_EQ(SerializeJson(measured.Encode()),
            R"({"job":42,"attempt":2,"rank":1,"event":"exited","exit_code":0,"phase":"run",)"
            R"("reason":"","peak_memory_bytes":3000000000,"cpu_ms":1500})");
}

TEST(Reports, RequestRoundTripsEntryByEntry) {
  ReportRequest req{
      "gpu-07",
      "c0ffee",
      {{42, 2, 1, ReportEvent::kRunning}, {42, 2, 1, ReportEvent::kExited, 0, "run", ""}}};
  std::string wire = SerializeJson(req.Encode());
  auto batch = ReportRequest::Decode(Parse(wire));
  ASSERT_TRUE(batch.ok()) << batch.status().message();
  EXPECT_EQ(batch->node, "gpu-07");
  EXPECT_EQ(batch->session, "c0ffee");
  ASSERT_EQ(batch->entries.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_TRUE(batch->entries[i].report.ok());
    EXPECT_EQ(*batch->entries[i].report, req.reports[i]);
    EXPECT_EQ(batch->entries[i].id, (AttemptRank{42, 2, 1}));
  }
}

TEST(Reports, OneBadEntryDoesNotFailTheBatch) {
  // An agent reports three ranks; the second entry has a string attempt and the third is not an
  // object. The first is still applied, and the server can answer the other two with an error each
  // (the second still names its job and rank).
  auto batch = ReportRequest::Decode(Parse(R"({"node":"n1","session":"s","reports":[)"
                                           R"({"job":1,"attempt":1,"rank":0,"event":"running"},)"
                                           R"({"job":2,"attempt":"1","rank":3,"event":"running"},)"
                                           R"("exited"]})"));
  ASSERT_TRUE(batch.ok()) << batch.status().message();
  ASSERT_EQ(batch->entries.size(), 3u);
  ASSERT_TRUE(batch->entries[0].report.ok());
  EXPECT_EQ(batch->entries[0].report->event, ReportEvent::kRunning);
  EXPECT_EQ(ErrorOf(batch->entries[1].report), "report: 'attempt' must be an integer");
  EXPECT_EQ(batch->entries[1].id, (AttemptRank{2, 0, 3}));
  EXPECT_EQ(ErrorOf(batch->entries[2].report), "report: each report must be a JSON object");
  EXPECT_EQ(batch->entries[2].id, (AttemptRank{}));
}

TEST(Reports, TheIntegrationTestsMinimalReportDecodes) {
  auto batch = ReportRequest::Decode(
      Parse(R"({"node": "fake", "session": "s", "reports": [{"job": 1, "attempt": 7, "rank": 0, )"
            R"("event": "running"}]})"));
  ASSERT_TRUE(batch.ok());
  ASSERT_TRUE(batch->entries[0].report.ok());
  const Report& r = *batch->entries[0].report;
  EXPECT_EQ(r.attempt, 7);
  EXPECT_EQ(r.phase, "run");  // the default
  EXPECT_FALSE(r.exit_code);
}

// A pull's progress travels with its "pulling" report; an over-long one is refused.
TEST(Reports, PullProgressRoundTrips) {
  const Report progress = Report::PullProgress({4, 1, 2}, "3 layers, 182.4 MB downloaded");
  auto back = Report::Decode(json::value(progress.Encode()));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(*back, progress);
  EXPECT_EQ(back->event, ReportEvent::kPulling);
  EXPECT_EQ(back->reason, "");
  json::object long_one = progress.Encode();
  long_one["progress"] = std::string(201, 'x');
  EXPECT_EQ(ErrorOf(Report::Decode(json::value(long_one))),
            "report: 'progress' must be at most 200 bytes");
}

TEST(Reports, BadEntriesNameTheField) {
  auto error = [](std::string_view text) { return ErrorOf(Report::Decode(Parse(text))); };
  EXPECT_EQ(error(R"({"attempt":1,"rank":0,"event":"running"})"), "report: 'job' is missing");
  EXPECT_EQ(error(R"({"job":1,"attempt":1,"rank":0})"), "report: 'event' is missing");
  EXPECT_EQ(error(R"({"job":1,"attempt":1,"rank":0,"event":"finished"})"),
            "report: 'event' must be accepted, pulling, setting_up, running or exited");
  EXPECT_EQ(error(R"({"job":1,"attempt":1,"rank":0,"event":"exited","exit_code":"3"})"),
            "report: 'exit_code' must be an integer or null");
  EXPECT_EQ(error(R"({"job":1,"attempt":1,"rank":0,"event":"exited","phase":"teardown"})"),
            "report: 'phase' must be pull, setup, run, launch, supervisor or prolog");
  EXPECT_EQ(error(R"({"job":1,"attempt":1,"rank":0,"event":"exited","cpu_ms":-1})"),
            "report: 'cpu_ms' must be a whole number from 0 to 2^50");
  EXPECT_EQ(error(R"({"job":1,"attempt":1,"rank":0,"event":"exited","peak_memory_bytes":"1G"})"),
            "report: 'peak_memory_bytes' must be a whole number from 0 to 2^50");
  EXPECT_EQ(error(R"({"job":1,"attempt":1,"rank":0,"event":"exited","cpu_ms":1125899906842625})"),
            "report: 'cpu_ms' must be a whole number from 0 to 2^50");
  // The whole request fails only when it is not a batch at all.
  EXPECT_EQ(ErrorOf(ReportRequest::Decode(Parse(R"({"node":"n","session":"s"})"))),
            "report: 'reports' must be an array");
  EXPECT_EQ(ErrorOf(ReportRequest::Decode(Parse(R"("reports")"))),
            "report: body must be a JSON object");
}

TEST(Reports, AnswersRoundTripWithTheirActions) {
  ReportAnswer a{{{42, 2, 1, ReportAction::kOk, ""},
                  {42, 1, 1, ReportAction::kStop, ""},
                  {2, 0, 3, ReportAction::kError, "report: 'attempt' must be an integer"}}};
  EXPECT_EQ(RoundTrip(a), a);
  EXPECT_EQ(SerializeJson(a.Encode()),
            R"({"results":[{"job":42,"attempt":2,"rank":1,"action":"ok"},)"
            R"({"job":42,"attempt":1,"rank":1,"action":"stop"},)"
            R"({"job":2,"attempt":0,"rank":3,"action":"error",)"
            R"("error":"report: 'attempt' must be an integer"}]})");
  EXPECT_EQ(ErrorOf(ReportAnswer::Decode(
                Parse(R"({"results":[{"job":1,"attempt":1,"rank":0,"action":"pause"}]})"))),
            "report answer: 'action' must be ok, stop or error");
  EXPECT_EQ(ErrorOf(ReportAnswer::Decode(Parse("{}"))),
            "report answer: 'results' must be an array");
}

TEST(Reports, EventAndActionNames) {
  EXPECT_EQ(ReportEventName(ReportEvent::kSettingUp), "setting_up");
  EXPECT_EQ(ParseReportEvent("exited"), ReportEvent::kExited);
  EXPECT_FALSE(ParseReportEvent("Exited"));
  EXPECT_EQ(ReportActionName(ReportAction::kStop), "stop");
  EXPECT_EQ(ParseReportAction("error"), ReportAction::kError);
  EXPECT_FALSE(ParseReportAction(""));
}

// --- log shipping ----------------------------------------------------------------------------

TEST(Logs, QueryRoundTrips) {
  LogAppend l{"gpu-07", "c0ffee", 42, 2, 1, 1 << 20};
  EXPECT_EQ(l.ToQueryString(), "node=gpu-07&session=c0ffee&job=42&attempt=2&rank=1&offset=1048576");
  std::map<std::string, std::string> query = {{"node", "gpu-07"}, {"session", "c0ffee"},
                                              {"job", "42"},      {"attempt", "2"},
                                              {"rank", "1"},      {"offset", "1048576"}};
  auto back = LogAppend::FromQuery(query);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(*back, l);
}

TEST(Logs, NamesOutsideTheSafeSetArePercentEncoded) {
  LogAppend l{"a b/c", "s", 1, 1, 0, 0};
  EXPECT_EQ(l.ToQueryString(), "node=a%20b%2Fc&session=s&job=1&attempt=1&rank=0&offset=0");
}

TEST(Logs, RankAndOffsetDefaultToZero) {
  auto l = LogAppend::FromQuery({{"node", "n"}, {"session", "s"}, {"job", "3"}, {"attempt", "1"}});
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->rank, 0);
  EXPECT_EQ(l->offset, 0);
}

TEST(Logs, BadNumbersAreRefused) {
  auto error = [](std::map<std::string, std::string> q) {
    return ErrorOf(LogAppend::FromQuery(q));
  };
  EXPECT_EQ(error({{"attempt", "1"}}), "logs: 'job' is missing");
  EXPECT_EQ(error({{"job", "1"}, {"attempt", "one"}}), "logs: 'attempt' must be an integer");
  EXPECT_EQ(error({{"job", "1"}, {"attempt", "1"}, {"offset", "12abc"}}),
            "logs: 'offset' must be an integer");
  EXPECT_EQ(error({{"job", "0"}, {"attempt", "1"}}), "logs: bad job, attempt, rank or offset");
  EXPECT_EQ(error({{"job", "1"}, {"attempt", "0"}}), "logs: bad job, attempt, rank or offset");
  EXPECT_EQ(error({{"job", "1"}, {"attempt", "1"}, {"rank", "-1"}}),
            "logs: bad job, attempt, rank or offset");
  EXPECT_EQ(error({{"job", "1"}, {"attempt", "1"}, {"offset", "-5"}}),
            "logs: bad job, attempt, rank or offset");
  EXPECT_EQ(error({{"job", "1"}, {"attempt", "4294967296"}}),
            "logs: bad job, attempt, rank or offset");
}

TEST(Logs, AnswersRoundTrip) {
  LogAppendAnswer stored{4096, ""};
  EXPECT_EQ(RoundTrip(stored), stored);
  EXPECT_EQ(SerializeJson(stored.Encode()), R"({"size":4096})");
  LogAppendAnswer gap{1024, "offset 2048 is past the stored size 1024"};
  EXPECT_EQ(RoundTrip(gap), gap);
  EXPECT_EQ(ErrorOf(LogAppendAnswer::Decode(Parse(R"({"error":"x"})"))),
            "logs answer: 'size' is missing");
}

// A batch's pieces come back as they went, whatever their bytes (newlines, NULs, none at all);
// a body that is cut short, a header that is not a line of JSON, a bad value or too much is
// refused naming the piece.
TEST(Logs, BatchesRoundTrip) {
  std::vector<LogPiece> pieces = {
      {.job = 3, .attempt = 1, .rank = 0, .offset = 0, .data = "hello\n"},
      {.job = 4,
       .attempt = 2,
       .rank = 5,
       .offset = 4096,
       .data = std::string("a\0b\n{\"job\":9}\n", 14)},
      {.job = 5, .attempt = 1, .rank = 0, .offset = 7, .data = ""},
  };
  const std::string body = EncodeLogBatch(pieces);
  auto decoded = DecodeLogBatch(body);
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  EXPECT_EQ(*decoded, pieces);
  EXPECT_TRUE(DecodeLogBatch("").ok());

  const std::string two = EncodeLogBatch({pieces[0], pieces[1]});
  EXPECT_EQ(ErrorOf(DecodeLogBatch(two.substr(0, two.size() - 2))),
            "logs batch: piece 2: says 14 bytes, 12 follow");
  EXPECT_EQ(ErrorOf(DecodeLogBatch("hello\n")),
            "malformed JSON in logs batch: piece 1: syntax error");
  EXPECT_EQ(ErrorOf(DecodeLogBatch(R"({"job":1,"attempt":1,"size":1})")),
            "logs batch: piece 1: its header is not a line of JSON");
  EXPECT_EQ(ErrorOf(DecodeLogBatch("{\"job\":1,\"attempt\":0,\"size\":0}\n")),
            "logs batch: piece 1: bad job, attempt, rank, offset or size");
  EXPECT_EQ(ErrorOf(DecodeLogBatch("{\"job\":1,\"attempt\":1}\n")),
            "logs batch: piece 1: 'size' is missing");
  std::string many;
  for (size_t i = 0; i <= kMaxLogPieces; ++i) many += "{\"job\":1,\"attempt\":1,\"size\":0}\n";
  EXPECT_EQ(ErrorOf(DecodeLogBatch(many)), "logs batch: over 1024 pieces");
  LogPiece big{.job = 1, .attempt = 1, .data = std::string(kMaxLogBatchBytes / 2 + 1, 'x')};
  EXPECT_EQ(ErrorOf(DecodeLogBatch(EncodeLogBatch({big, big}))),
            "logs batch: over 4194304 bytes of output in all");

  LogBatchAnswer answer{{{6, ""}, {4096, "log gap: have 4096 bytes, got data at 8192"}}};
  auto back = LogBatchAnswer::Decode(Parse(SerializeJson(answer.Encode())));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->results, answer.results);
  EXPECT_EQ(ErrorOf(LogBatchAnswer::Decode(Parse("{}"))),
            "logs batch answer: 'results' must be an array");
}

TEST(Health, RoundTripsInRegistrationsAndReports) {
  NodeHealth h;
  h.faults.push_back({"xid", 2, "xid 79 on GPU 2 (fell off the bus)", 1000, false});
  h.faults.push_back({"prolog", -1, "prolog/10-x: exit code 1", 2000, true});
  h.probes.push_back({"xid", false, false, "xid 79 on GPU 2 (fell off the bus)", 3000, 4, 5, 0});
  HealthRequest request{"n1", "s1", h};
  auto back = HealthRequest::Decode(json::parse(json::serialize(request.Encode())));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(*back, request);
  EXPECT_EQ(h.NodeReason(), "prolog/10-x: exit code 1");
  EXPECT_TRUE(h.NodeFaulty());

  RegisterRequest r;
  r.name = "n1";
  r.node_id = "0123456789";
  r.cpus_milli = 1000;
  r.health = h;
  auto reg = RegisterRequest::Decode(json::parse(json::serialize(r.Encode())));
  ASSERT_TRUE(reg.ok()) << reg.status().message();
  EXPECT_EQ(reg->health, h);
  r.health.reset();
  EXPECT_FALSE(RegisterRequest::Decode(r.Encode())->health) << "an agent that does not probe";

  auto answer = HealthAnswer::Decode(HealthAnswer{12345}.Encode());
  ASSERT_TRUE(answer.ok());
  EXPECT_EQ(answer->now_ms, 12345);
}

TEST(Health, RefusesBadShapesAndTooMuch) {
  auto error = [](const std::string& text) {
    auto r = HealthRequest::Decode(json::parse(text));
    return r.ok() ? std::string("ok") : r.status().message();
  };
  EXPECT_EQ(error(R"({"node":"n1","session":"s"})"), "health: 'health' is missing");
  EXPECT_EQ(error(R"({"health":{"faults":{}}})"), "health: 'health.faults' must be an array");
  EXPECT_EQ(error(R"({"health":{"faults":[{"probe":"x","gpu":-2,"reason":"r"}]}})"),
            "health: a health fault's gpu, probe or reason is out of range");
  EXPECT_EQ(error(R"({"health":{"faults":[{"gpu":1,"reason":"r"}]}})"),
            "health: health fault: 'probe' is missing");
  json::array many;
  for (int i = 0; i < 257; ++i) many.push_back(json::object{{"name", "p"}});
  json::object body{{"health", json::object{{"probes", many}}}};
  EXPECT_EQ(error(json::serialize(body)), "health: 'health.probes' has more than 256 entries");
}

TEST(Watch, AMigLayoutRoundTripsAndABadOneIsRefused) {
  const MigLayoutMessage m{1, {"1g.10gb", "1g.10gb+me", "3g.40gb"}};
  auto back = DecodeWatchMessage(EncodeWatchLine(m));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(std::get<MigLayoutMessage>(*back), m);
  for (const char* bad : {R"({"type":"mig_layout","gpu":1,"profiles":[]})",
                          R"({"type":"mig_layout","gpu":100,"profiles":["1g.10gb"]})",
                          R"({"type":"mig_layout","gpu":1,"profiles":["1g 10gb"]})",
                          R"({"type":"mig_layout","gpu":1,"profiles":"1g.10gb"})",
                          R"({"type":"mig_layout","profiles":["1g.10gb"]})"}) {
    EXPECT_EQ(DecodeWatchMessage(bad).status().code(), Code::kInvalidArgument) << bad;
  }
}

TEST(Health, TheResetMessageIsAWatchMessage) {
  auto m = DecodeWatchMessage(EncodeWatchLine(HealthResetMessage{}));
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(std::holds_alternative<HealthResetMessage>(*m));
}

}  // namespace
}  // namespace berth::proto
