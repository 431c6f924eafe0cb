// `berth image`: the caller's container images on the nodes (docs/task-yaml.md "Containers").
//
// Each command is a job, so it is placed, identified, isolated, logged and cancelled like any job
// and touches only the caller's own image store on each node:
// - prefetch: a gang with one rank on each node of the pool that runs containers, whose only step
//   is the pull (no setup, no run);
// - ls and rm: a small host job on each chosen node (one rank per node, or the one node named with
//   --node: node_selector berth.node) that runs the user's podman there ($BERTH_PODMAN,
//   agent/container.h), whose output this command reads back per rank and prints.
#include <fmt/format.h>

#include <chrono>
#include <thread>

#include "cli/command_context.h"
#include "cli/commands.h"
#include "cli/table.h"
#include "common/job_status.h"
#include "common/json_util.h"
#include "common/quantity.h"
#include "common/resources.h"
#include "common/strings.h"

namespace berth::cli {
namespace {

// Which nodes a command acts on: every node that is up and runs containers, of `pool` when set,
// or only `node`.
struct NodeChoice {
  std::string pool;
  std::string node;
};

Result<std::vector<std::string>> ContainerNodes(Connection& conn, const NodeChoice& choice) {
  auto nodes = conn.Call("GET", "/v1/nodes");
  if (!nodes.ok()) return nodes.status();
  std::vector<std::string> names;
  for (const auto& nv : nodes->as_object().at("nodes").as_array()) {
    const json::object& n = nv.as_object();
    const std::string name = GetString(n, "name").value();
    if (!choice.node.empty() && name != choice.node) continue;
    const bool runs = n.at("labels").as_object().contains(kContainerRuntimeLabel);
    if (!choice.node.empty() && (!runs || GetString(n, "state").value() != "UP")) {
      return Status::Infeasible(
          fmt::format("node {} {}", name,
                      !runs ? "runs no containers" : "is " + GetString(n, "state").value()));
    }
    if (GetString(n, "state").value() != "UP" || !runs) continue;
    if (!choice.pool.empty() && GetString(n, "pool").value() != choice.pool) continue;
    names.push_back(name);
  }
  if (!choice.node.empty() && names.empty()) {
    return Status::NotFound("no node named " + choice.node);
  }
  if (names.empty()) {
    return Status::Infeasible(
        fmt::format("no node{} that is up runs containers",
                    choice.pool.empty() ? std::string() : " in pool '" + choice.pool + "'"));
  }
  return names;
}

// Places `spec` with one rank on each chosen node (num_nodes and, for one named node, its
// node_selector). Returns the job's id and how many nodes.
Result<std::pair<int64_t, size_t>> SubmitOnNodes(Connection& conn, JobSpec spec,
                                                 const NodeChoice& choice) {
  auto nodes = ContainerNodes(conn, choice);
  if (!nodes.ok()) return nodes.status();
  spec.pool = choice.pool;
  // (a host job would otherwise be free to land on nodes without podman, where it sees nothing)
  spec.node_selector[kContainerRuntimeLabel] = "podman";
  if (!choice.node.empty()) spec.node_selector[kNodeNameSelector] = choice.node;
  spec.num_nodes = static_cast<int>(nodes->size());
  BERTH_RETURN_IF_ERROR(ValidateSpec(spec));
  auto res = SubmitSpec(conn, spec, std::nullopt);
  if (!res.ok()) return res.status();
  return std::pair{AsInt(res->as_object().at("jobs").as_array().front()).value(), nodes->size()};
}

int Prefetch(const GlobalFlags& g, const std::string& image, const NodeChoice& where,
             const std::string& cpus_text, bool detach) {
  JobSpec spec;
  spec.name = std::string(kImageJobPrefix) + "prefetch";
  spec.container =
      ContainerSpec{.image = image.starts_with("docker:") ? image.substr(7) : image,
                    // The tag's current image, whatever a node was told about it lately.
                    .pull = PullPolicy::kAlways};
  // The job's CPU limit is the pull's: unpacking layers is work.
  auto cpus = ParseMilli(cpus_text);
  if (!cpus || *cpus <= 0) return Fail(Status::Invalid("--cpus: expected a positive number"));
  spec.resources.cpus = *cpus;
  Connection conn(g.server, g.token, g.self_exe);
  if (Status st = conn.Connect(); !st.ok()) return Fail(st);
  auto submitted = SubmitOnNodes(conn, spec, where);
  if (!submitted.ok()) return Fail(submitted.status());
  const auto [id, count] = *submitted;
  fmt::print(detach ? stdout : stderr, "Job {} pulls {} on {} node(s).\n", id,
             spec.container->image, count);
  std::fflush(stdout);
  if (detach) return 0;
  return FollowToEnd(conn, id);
}

// What one rank of an ls / rm job printed, with its node.
struct NodeOutput {
  std::string node;
  std::string output;
};

// Waits for job `id` to end, then reads back each rank's output.
Result<std::vector<NodeOutput>> OutputPerNode(Connection& conn, int64_t id) {
  json::object job;
  for (int polls = 0;; ++polls) {
    auto res = conn.Call("GET", fmt::format("/v1/jobs/{}", id));
    if (!res.ok()) return res.status();
    job = res->as_object();
    auto status = ParseJobStatus(job.at("status").as_string());
    if (status && IsTerminal(*status)) break;
    if (polls == 20) {
      fmt::print(stderr, "berth: job {} is {}: {}\n", id, job.at("status").as_string(),
                 std::string(job.at("reason").as_string()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(polls < 20 ? 100 : 500));
  }
  std::vector<NodeOutput> out;
  const json::array& placement = job.at("placement").as_array();
  for (size_t rank = 0; rank < placement.size(); ++rank) {
    NodeOutput node{std::string(placement[rank].as_object().at("node").as_string()), ""};
    for (int64_t offset = 0;;) {
      auto res = conn.http().Request(
          "GET", fmt::format("/v1/jobs/{}/logs?offset={}&rank={}&wait_ms=0", id, offset, rank), "",
          70'000);
      if (!res.ok()) return res.status();
      if (res->status != 200 || res->body.empty()) break;
      node.output += res->body;
      offset = std::atoll(res->Header("X-Berth-Offset").c_str());
    }
    out.push_back(std::move(node));
  }
  if (out.empty()) {
    return Status::Unavailable(fmt::format("job {} ended without running: {}", id,
                                           std::string(job.at("reason").as_string())));
  }
  return out;
}

// Runs `spec` on the chosen nodes (SubmitOnNodes) and returns what each rank printed.
Result<std::vector<NodeOutput>> RunOnNodes(const GlobalFlags& g, const JobSpec& spec,
                                           const NodeChoice& where) {
  Connection conn(g.server, g.token, g.self_exe);
  BERTH_RETURN_IF_ERROR(conn.Connect());
  auto submitted = SubmitOnNodes(conn, spec, where);
  if (!submitted.ok()) return submitted.status();
  return OutputPerNode(conn, submitted->first);
}

// One image line of `podman images --format` below: image, digest, size, created (tab-separated).
constexpr char kListFormat[] =
    "{{.Repository}}:{{.Tag}}\\t{{.Digest}}\\t{{.Size}}\\t{{.CreatedSince}}";

int List(const GlobalFlags& g, const NodeChoice& where, bool as_json) {
  JobSpec spec;
  spec.name = std::string(kImageJobPrefix) + "image-ls";
  spec.resources.cpus = 100;
  // Nothing there when no container job of the caller's ran on the node. Every rank ends well (a
  // failed rank would stop the others'), saying what went wrong on a line of its own.
  spec.run = fmt::format(
      "[ -x \"$BERTH_PODMAN\" ] || exit 0\n"
      "if list=$(\"$BERTH_PODMAN\" --log-level=error images --format $'{}' 2>&1); then\n"
      "  [ -z \"$list\" ] || printf '%s\\n' \"$list\" | sed 's/^/berth-image\\t/'\n"
      "else\n"
      "  printf '%s\\n' \"$list\" | sed 's/^/berth-error\\t/'\n"
      "fi\n",
      kListFormat);
  auto outputs = RunOnNodes(g, spec, where);
  if (!outputs.ok()) return Fail(outputs.status());
  Table table({"NODE", "IMAGE", "DIGEST", "SIZE", "CREATED"});
  json::array rows;
  int rc = 0;
  for (const NodeOutput& node : *outputs) {
    for (const std::string& line : Split(node.output, '\n')) {
      std::vector<std::string> f = Split(line, '\t');
      if (f.size() != 5 || f[0] != "berth-image") {
        // podman's complaint, as it said it
        if (!Trim(line).empty()) {
          fmt::print(stderr, "berth: {}: {}\n", node.node,
                     StartsWith(line, "berth-error\t") ? line.substr(12) : line);
          rc = 1;
        }
        continue;
      }
      rows.push_back(json::object{{"node", node.node},
                                  {"image", f[1]},
                                  {"digest", f[2]},
                                  {"size", f[3]},
                                  {"created", f[4]}});
      table.Add({node.node, f[1], f[2].substr(0, 19), f[3], f[4]});
    }
  }
  if (as_json) {
    fmt::print("{}\n", SerializeJson(json::object{{"images", rows}}));
  } else if (rows.empty()) {
    fmt::print(stderr, "No images of yours on {} node(s).\n", outputs->size());
  } else {
    fmt::print("{}", table.Render());
  }
  return rc;
}

int Remove(const GlobalFlags& g, const std::string& image, const NodeChoice& where) {
  JobSpec spec;
  spec.name = std::string(kImageJobPrefix) + "image-rm";
  spec.resources.cpus = 100;
  const std::string ref = image.starts_with("docker:") ? image.substr(7) : image;
  spec.envs.emplace_back("IMAGE", ref);
  // podman refuses an image a container of the caller's uses (a job running in it): said as it
  // says it. Every rank ends well (a failed rank would stop the others' mid-way).
  spec.run =
      "podman() { \"$BERTH_PODMAN\" --log-level=error \"$@\"; }\n"
      "failed() { printf '%s\\n' \"$1\" | sed 's/^/berth-error\\t/'; }\n"
      "[ -x \"$BERTH_PODMAN\" ] || { echo berth-absent; exit 0; }\n"
      "said=$(podman image exists \"$IMAGE\" 2>&1)\n"
      "case $? in\n"
      "  0) if said=$(podman rmi \"$IMAGE\" 2>&1 >/dev/null); then echo berth-removed; "
      "else failed \"$said\"; fi;;\n"
      "  1) echo berth-absent;;\n"
      "  *) failed \"${said:-podman could not tell whether $IMAGE is there}\";;\n"
      "esac\n";
  auto outputs = RunOnNodes(g, spec, where);
  if (!outputs.ok()) return Fail(outputs.status());
  int rc = 0;
  for (const NodeOutput& node : *outputs) {
    std::vector<std::string> lines;
    for (const std::string& line : Split(Trim(node.output), '\n')) {
      lines.push_back(StartsWith(line, "berth-error\t") ? line.substr(12) : line);
    }
    const std::string said = Join(lines, "; ");
    if (said == "berth-removed") {
      fmt::print("{}: removed {}\n", node.node, ref);
    } else if (said == "berth-absent") {
      fmt::print("{}: {} is not there\n", node.node, ref);
    } else {
      fmt::print(stderr, "berth: {}: {}\n", node.node, said.empty() ? "no answer" : said);
      rc = 1;
    }
  }
  return rc;
}

struct ImageFlags {
  std::string image;
  NodeChoice where;
  std::string cpus = "1";
  bool detach = false;
  bool as_json = false;
};

}  // namespace

void AddImageCommand(CommandContext& c) {
  auto* image = c.app.add_subcommand(
      "image",
      "Your container images on the nodes: berth image prefetch IMAGE | ls | rm IMAGE, each "
      "[--pool P | --node N]");
  image->require_subcommand(1);
  auto& flags = c.Keep<ImageFlags>();
  auto where = [&](CLI::App* sub) {
    sub->add_option("--pool", flags.where.pool, "Only this pool's nodes");
    sub->add_option("--node", flags.where.node, "Only this node")->excludes("--pool");
    c.AddGlobal(sub);
  };
  auto* prefetch = image->add_subcommand(
      "prefetch",
      "Pull an image into your image store on every node (of a pool) that runs containers, ahead "
      "of the jobs that use it: a job with one rank per node, shown by berth queue and show");
  prefetch->add_option("image", flags.image, "The image (REGISTRY/NAME:TAG or ...@sha256:...)")
      ->required();
  prefetch->add_option("--cpus", flags.cpus, "CPUs each node's pull may use")
      ->capture_default_str();
  prefetch->add_flag("-d,--detach", flags.detach, "Print the job's id and return");
  where(prefetch);
  prefetch->callback(
      [&] { c.rc = Prefetch(c.g, flags.image, flags.where, flags.cpus, flags.detach); });

  auto* ls = image->add_subcommand(
      "ls",
      "List your images on every node that runs containers (or one): node, image, digest, size, "
      "age. A small job on each node (it waits where a node's CPUs are all taken)");
  ls->add_flag("--json", flags.as_json,
               "Print {\"images\": [{node, image, digest, size, created}]}");
  where(ls);
  ls->callback([&] { c.rc = List(c.g, flags.where, flags.as_json); });

  auto* rm = image->add_subcommand(
      "rm",
      "Remove an image from your image store on every node that runs containers (or one); "
      "refused where a job of yours runs in it");
  rm->add_option("image", flags.image, "The image (REGISTRY/NAME:TAG or ...@sha256:...)")
      ->required();
  where(rm);
  rm->callback([&] { c.rc = Remove(c.g, flags.image, flags.where); });
}

}  // namespace berth::cli
