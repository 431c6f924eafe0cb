// `berth image prefetch`: pulls an image on the nodes of a pool ahead of the jobs that use it
// (docs/task-yaml.md "Containers").
//
// It is a job: a gang with one rank on each node of the pool that runs containers, whose only
// step is the pull (no setup, no run), so a prefetch is placed, identified, isolated, logged and
// cancelled like any job, and pulls into the caller's own image store on each node.
#include <fmt/format.h>

#include "cli/command_context.h"
#include "cli/commands.h"
#include "common/json_util.h"
#include "common/quantity.h"

namespace berth::cli {
namespace {

struct PrefetchFlags {
  std::string image;
  std::string pool;
  std::string cpus = "1";
  bool detach = false;
};

int Prefetch(const GlobalFlags& g, const PrefetchFlags& f) {
  JobSpec spec;
  spec.name = "prefetch";
  spec.container =
      ContainerSpec{.image = f.image.starts_with("docker:") ? f.image.substr(7) : f.image,
                    // The tag's current image, whatever a node was told about it lately.
                    .pull = PullPolicy::kAlways};
  spec.pool = f.pool;
  // The job's CPU limit is the pull's: unpacking layers is work.
  auto cpus = ParseMilli(f.cpus);
  if (!cpus || *cpus <= 0) return Fail(Status::Invalid("--cpus: expected a positive number"));
  spec.resources.cpus = *cpus;
  Connection conn(g.server, g.token, g.self_exe);
  if (Status st = conn.Connect(); !st.ok()) return Fail(st);
  auto nodes = conn.Call("GET", "/v1/nodes");
  if (!nodes.ok()) return Fail(nodes.status());
  int count = 0;
  for (const auto& nv : nodes->as_object().at("nodes").as_array()) {
    const json::object& n = nv.as_object();
    const json::object& labels = n.at("labels").as_object();
    if (GetString(n, "state").value() != "UP" || !labels.contains(kContainerRuntimeLabel)) continue;
    if (!f.pool.empty() && GetString(n, "pool").value() != f.pool) continue;
    ++count;
  }
  if (count == 0) {
    return Fail(Status::Infeasible(
        fmt::format("no node{} that is up runs containers",
                    f.pool.empty() ? std::string() : " in pool '" + f.pool + "'")));
  }
  spec.num_nodes = count;
  if (Status valid = ValidateSpec(spec); !valid.ok()) return Fail(valid);
  auto res = SubmitSpec(conn, spec, std::nullopt);
  if (!res.ok()) return Fail(res.status());
  const int64_t id = AsInt(res->as_object().at("jobs").as_array().front()).value();
  fmt::print(f.detach ? stdout : stderr, "Job {} pulls {} on {} node(s).\n", id,
             spec.container->image, count);
  std::fflush(stdout);
  if (f.detach) return 0;
  return FollowToEnd(conn, id);
}

}  // namespace

void AddImageCommand(CommandContext& c) {
  auto* image = c.app.add_subcommand(
      "image", "Container images on the nodes: berth image prefetch IMAGE [--pool P]");
  image->require_subcommand(1);
  auto& flags = c.Keep<PrefetchFlags>();
  auto* prefetch = image->add_subcommand(
      "prefetch",
      "Pull an image into your image store on every node (of a pool) that runs containers, ahead "
      "of the jobs that use it: a job with one rank per node, shown by berth queue and show");
  prefetch->add_option("image", flags.image, "The image (REGISTRY/NAME:TAG or ...@sha256:...)")
      ->required();
  prefetch->add_option("--pool", flags.pool, "Only this pool's nodes");
  prefetch->add_option("--cpus", flags.cpus, "CPUs each node's pull may use")
      ->capture_default_str();
  prefetch->add_flag("-d,--detach", flags.detach, "Print the job's id and return");
  c.AddGlobal(prefetch);
  prefetch->callback([&] { c.rc = Prefetch(c.g, flags); });
}

}  // namespace berth::cli
