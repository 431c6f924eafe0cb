// Task files as users write them: the docs/design.md example, SkyPilot's own examples, and the
// mistakes people make. Every error must say file, line and field, because that is all a user has
// to go on.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "spec/job_spec.h"

namespace berth {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;

ParsedTask MustParseTask(const std::string& yaml) {
  auto parsed = ParseTaskYaml(yaml, "task.yaml");
  EXPECT_TRUE(parsed.ok()) << parsed.status().message();
  return parsed.ok() ? *parsed : ParsedTask{};
}

std::string TaskErrorOf(const std::string& yaml) {
  auto parsed = ParseTaskYaml(yaml, "task.yaml");
  EXPECT_FALSE(parsed.ok()) << "parsed without error:\n" << yaml;
  return parsed.ok() ? "" : parsed.status().message();
}

TEST(TaskYaml, InteractiveIsTrueOrFalseInAContainerToo) {
  EXPECT_FALSE(MustParseTask("run: bash\n").spec.interactive);
  EXPECT_TRUE(MustParseTask("interactive: true\nrun: bash\n").spec.interactive);
  EXPECT_FALSE(MustParseTask("interactive: false\nrun: bash\n").spec.interactive);
  EXPECT_THAT(TaskErrorOf("run: bash\ninteractive: yes please\n"),
              HasSubstr("task.yaml:2: interactive: expected true or false"));
  const JobSpec in_image =
      MustParseTask("interactive: true\nresources:\n  image_id: docker:busybox\nrun: sh\n").spec;
  EXPECT_TRUE(in_image.interactive);
  ASSERT_TRUE(in_image.container.has_value());
}

// The example of docs/design.md "Task YAML", comments and all: every field lands where it should.
TEST(TaskYaml, DesignExampleParsesFully) {
  ParsedTask t = MustParseTask(R"(name: train
num_nodes: 2                  # gang: all nodes start together or not at all
resources:
  accelerators: V100:4        # per node; also {V100: 4}; fractional (T4:0.5) shares one device
  cpus: 8                     # per node; "8+" accepted
  memory: 32                  # GiB per node; "32+" accepted
envs: {LR: "0.01"}
workdir: .                    # where run/setup execute
setup: pip install -r requirements.txt
run: python train.py --lr $LR
# berth extensions
priority: 10                  # higher runs first and may preempt lower
placement: {exclusive: rack}  # all nodes in one value of node label "rack", which no other job shares
pool: research                # only nodes of this pool
node_selector: {gpu_gen: hopper}  # only nodes with these labels
time_limit: 4h                # stopped after this; lets backfill plan around reservations
recovery: {on_preemption: requeue, on_node_lost: fail}
)");
  const JobSpec& s = t.spec;
  EXPECT_EQ(s.name, "train");
  EXPECT_EQ(s.num_nodes, 2);
  EXPECT_EQ(s.resources.gpu_type, "V100");
  EXPECT_EQ(s.resources.gpu_milli, 4000);
  EXPECT_EQ(s.resources.cpus, 8000);
  EXPECT_EQ(s.resources.memory, 32 * 1024);
  EXPECT_THAT(s.envs, ElementsAre(Pair("LR", "0.01")));
  EXPECT_EQ(s.workdir, ".");  // the CLI makes it absolute, not the parser
  EXPECT_EQ(s.setup, "pip install -r requirements.txt");
  EXPECT_EQ(s.run, "python train.py --lr $LR");
  EXPECT_EQ(s.priority, 10);
  EXPECT_EQ(s.exclusive, "rack");
  EXPECT_EQ(s.pool, "research");
  EXPECT_THAT(s.node_selector, ElementsAre(Pair("gpu_gen", "hopper")));
  EXPECT_EQ(s.time_limit, 4 * 3'600'000);
  EXPECT_EQ(s.on_preemption, RecoveryAction::kRequeue);
  EXPECT_EQ(s.on_node_lost, RecoveryAction::kFail);
  EXPECT_THAT(t.warnings, IsEmpty());
}

// SkyPilot's examples/resnet_distributed_torch-style dnn.yaml: multi-line setup and run scripts,
// with $SKYPILOT_* variables that berth sets, kept byte for byte.
TEST(TaskYaml, SkyPilotDnnExample) {
  ParsedTask t = MustParseTask(R"(name: resnet
resources:
  accelerators: V100:4

setup: |
  pip install torch torchvision
  git clone https://github.com/michaelzhiluo/pytorch-distributed-resnet

run: |
  cd pytorch-distributed-resnet
  python3 -m torch.distributed.launch --nproc_per_node=$SKYPILOT_NUM_GPUS_PER_NODE \
    main.py --epochs 1
)");
  EXPECT_EQ(t.spec.resources.gpu_milli, 4000);
  EXPECT_EQ(t.spec.setup,
            "pip install torch torchvision\n"
            "git clone https://github.com/michaelzhiluo/pytorch-distributed-resnet\n");
  EXPECT_EQ(t.spec.run,
            "cd pytorch-distributed-resnet\n"
            "python3 -m torch.distributed.launch --nproc_per_node=$SKYPILOT_NUM_GPUS_PER_NODE \\\n"
            "  main.py --epochs 1\n");
}

// A job that names nothing asks for half a CPU and no memory, so two such jobs share a core.
TEST(TaskYaml, DefaultsAreHalfACpuNoMemoryNoGpu) {
  ParsedTask t = MustParseTask("run: echo hi\n");
  EXPECT_EQ(t.spec.name, "");  // the CLI picks the default name
  EXPECT_EQ(t.spec.num_nodes, 1);
  EXPECT_EQ(t.spec.resources.cpus, 500);
  EXPECT_EQ(t.spec.resources.memory, 0);
  EXPECT_FALSE(t.spec.resources.wants_gpu());
  EXPECT_EQ(t.spec.time_limit, std::nullopt);
  EXPECT_EQ(t.spec.on_preemption, RecoveryAction::kRequeue);
  EXPECT_EQ(t.spec.on_node_lost, RecoveryAction::kFail);
}

TEST(TaskYaml, EveryAcceleratorFormMeansTheSame) {
  EXPECT_EQ(MustParseTask("resources: {accelerators: V100:4}").spec.resources.gpu_milli, 4000);
  EXPECT_EQ(MustParseTask("resources: {accelerators: {V100: 4}}").spec.resources.gpu_milli, 4000);
  EXPECT_EQ(MustParseTask("resources:\n  accelerators:\n    V100: 4\n").spec.resources.gpu_milli,
            4000);
  EXPECT_EQ(MustParseTask("resources: {accelerators: V100}").spec.resources.gpu_milli, 1000);
  ResourceRequest half = MustParseTask("resources: {accelerators: T4:0.5}").spec.resources;
  EXPECT_EQ(half.gpu_type, "T4");
  EXPECT_EQ(half.gpu_milli, 500);
  EXPECT_EQ(MustParseTask("resources: {accelerators: {T4: 0.5}}").spec.resources, half);
}

// "8+" is SkyPilot for "at least 8"; a request is a minimum anyway, so it means 8.
TEST(TaskYaml, PlusMeansAtLeast) {
  ResourceRequest r = MustParseTask("resources:\n  cpus: 8+\n  memory: \"32+\"\n").spec.resources;
  EXPECT_EQ(r.cpus, 8000);
  EXPECT_EQ(r.memory, 32 * 1024);
  EXPECT_EQ(MustParseTask("resources: {cpus: 0.25, memory: 0.5}").spec.resources.memory, 512);
}

TEST(TaskYaml, DurationsAndRecovery) {
  JobSpec s = MustParseTask(
                  "time_limit: 90\nkill_grace: 30s\n"
                  "recovery: {on_preemption: fail, on_node_lost: requeue, on_node_fault: fail}\n")
                  .spec;
  EXPECT_EQ(s.time_limit, 90 * 60'000);  // a bare number is minutes, as Slurm's --time
  EXPECT_EQ(s.kill_grace, 30'000);
  EXPECT_EQ(s.on_preemption, RecoveryAction::kFail);
  EXPECT_EQ(s.on_node_lost, RecoveryAction::kRequeue);
  EXPECT_EQ(s.on_node_fault, RecoveryAction::kFail);
  // "kill_grace: 30" could mean seconds or minutes; berth asks for a unit instead of guessing.
  EXPECT_EQ(
      TaskErrorOf("kill_grace: 30\n"),
      "task.yaml:1: kill_grace: expected a duration like 30s or 2m (with a unit), got \"30\"");
}

// envs values are strings whatever YAML thinks they are; secrets are env vars too and win over
// envs.
TEST(TaskYaml, EnvsAndSecretsBecomeStringsInOrder) {
  JobSpec s = MustParseTask(R"(secrets:
  HF_TOKEN: hf_secret
envs:
  LR: 0.01
  EPOCHS: 3
  HF_TOKEN: placeholder
  DEBUG: true
)")
                  .spec;
  EXPECT_THAT(s.envs, ElementsAre(Pair("LR", "0.01"), Pair("EPOCHS", "3"),
                                  Pair("HF_TOKEN", "hf_secret"), Pair("DEBUG", "true")));
}

// Cloud-only fields are not mistakes in a SkyPilot file; they are noted, with their line, and
// ignored.
TEST(TaskYaml, CloudFieldsAreWarningsWithTheirLine) {
  ParsedTask t = MustParseTask(R"(name: train
resources:
  accelerators: A100:8
  infra: aws/us-east-1
  use_spot: true
  disk_size: 256
storage_mounts:
  /data: {source: s3://bucket/data}
run: python train.py
)");
  EXPECT_EQ(t.spec.resources.gpu_milli, 8000);
  EXPECT_THAT(
      t.warnings,
      ElementsAre(
          "task.yaml:4: 'infra' only matters to a cloud provisioner; berth ignores it",
          "task.yaml:5: 'use_spot' only matters to a cloud provisioner; berth ignores it",
          "task.yaml:6: 'disk_size' only matters to a cloud provisioner; berth ignores it",
          "task.yaml:7: 'storage_mounts' only matters to a cloud provisioner; berth ignores it"));
}

// file_mounts name local sources (uploaded with the job); object stores are refused by name.
TEST(TaskYaml, FileMountsRefuseObjectStores) {
  auto bucket = ParseTaskYaml("run: x\nfile_mounts:\n  /data: s3://bucket/data\n", "task.yaml");
  EXPECT_EQ(bucket.status().message(),
            "task.yaml:3: file_mounts: /data: s3://bucket/data: object-store sources are not "
            "supported; give a local file or directory (it is uploaded with the job)");
  auto storage = ParseTaskYaml("run: x\nfile_mounts:\n  /data:\n    source: s3://b\n", "task.yaml");
  EXPECT_NE(storage.status().message().find("object-store sources are not supported"),
            std::string::npos);
  auto local =
      ParseTaskYaml("run: x\nfile_mounts:\n  /data: ./data\n  ~/cfg.yaml: cfg.yaml\n", "task.yaml");
  ASSERT_TRUE(local.ok()) << local.status().message();
  ASSERT_EQ(local->spec.file_mounts.size(), 2u);
  EXPECT_EQ(local->spec.file_mounts[0].target, "/data");
  EXPECT_EQ(local->spec.file_mounts[0].source, "./data");
  EXPECT_EQ(local->spec.file_mounts[1].target, "~/cfg.yaml");
  auto dotdot = ParseTaskYaml("run: x\nfile_mounts:\n  /data/../etc: ./data\n", "task.yaml");
  EXPECT_NE(dotdot.status().message().find("'..' is not allowed"), std::string::npos);
}

TEST(TaskYaml, MisspelledFieldIsAnErrorWithASuggestion) {
  EXPECT_EQ(TaskErrorOf("name: x\nrun: echo\nresouces:\n  cpus: 2\n"),
            "task.yaml:3: unknown field 'resouces' (did you mean 'resources'?)");
  EXPECT_EQ(TaskErrorOf("resources:\n  cpus: 2\n  acelerators: V100:1\n"),
            "task.yaml:3: resources: unknown field 'acelerators' (did you mean 'accelerators'?)");
  // gpus is far from accelerators by spelling, and close to cpus, which would be the wrong hint.
  EXPECT_EQ(TaskErrorOf("resources: {gpus: 2}"),
            "task.yaml:1: resources: unknown field 'gpus' (did you mean 'accelerators'?)");
  EXPECT_EQ(TaskErrorOf("walltime: 2h\n"), "task.yaml:1: unknown field 'walltime'");
  EXPECT_EQ(TaskErrorOf("recovery: {on_preempt: fail}\n"),
            "task.yaml:1: recovery: unknown field 'on_preempt' (did you mean 'on_preemption'?)");
}

TEST(TaskYaml, WrongTypesNameLineAndField) {
  EXPECT_EQ(TaskErrorOf("run: x\nresources:\n  accelerators: V100:1\n  cpus: lots\n"),
            "task.yaml:4: resources.cpus: expected a number like 8 or \"8+\", got \"lots\"");
  EXPECT_EQ(TaskErrorOf("num_nodes: two\n"),
            "task.yaml:1: num_nodes: expected a whole number, got \"two\"");
  EXPECT_EQ(TaskErrorOf("run:\n  - echo a\n  - echo b\n"),
            "task.yaml:2: run: expected a string, got a list");
  EXPECT_EQ(TaskErrorOf("resources: V100:4\n"),
            "task.yaml:1: resources: expected a map, got \"V100:4\"");
  EXPECT_EQ(TaskErrorOf("envs:\n  - LR=1\n"),
            "task.yaml:2: envs: expected a map of NAME: value, got a list");
  EXPECT_EQ(TaskErrorOf("time_limit: soon\n"),
            "task.yaml:1: time_limit: expected a duration like 90m, 2h or 1h30m (a bare number is "
            "minutes), got \"soon\"");
}

TEST(TaskYaml, BadCountsNameLineAndField) {
  EXPECT_EQ(TaskErrorOf("run: x\nresources:\n  cpus: -2\n"),
            "task.yaml:3: resources.cpus must be positive, got -2");
  // Zero CPUs passes parsing and is caught by ValidateSpec, which still gets the line.
  EXPECT_THAT(TaskErrorOf("resources:\n  cpus: 0\n"),
              HasSubstr("task.yaml:2: resources.cpus must be positive"));
  EXPECT_EQ(TaskErrorOf("num_nodes: 0\n"),
            "task.yaml:1: num_nodes must be between 1 and 1024, got 0");
  EXPECT_EQ(TaskErrorOf("resources:\n  accelerators: V100:0\n"),
            "task.yaml:2: resources.accelerators: the GPU count must be positive, got 0 (leave "
            "accelerators out to ask for no GPU)");
  EXPECT_EQ(
      TaskErrorOf("resources:\n  accelerators: V100:1.5\n"),
      "task.yaml:2: resources.accelerators: more than one GPU must be a whole number, got 1.5");
  EXPECT_EQ(TaskErrorOf("resources:\n  accelerators: {V100: -1}\n"),
            "task.yaml:2: resources.accelerators: the GPU count must be positive, got -1 (leave "
            "accelerators out to ask for no GPU)");
}

TEST(TaskYaml, SeveralAcceleratorTypesAreRefused) {
  const std::string kWant =
      "resources.accelerators: choosing among several accelerator types is not supported; name one";
  EXPECT_EQ(TaskErrorOf("resources:\n  accelerators: [V100:1, A100:1]\n"), "task.yaml:2: " + kWant);
  EXPECT_EQ(TaskErrorOf("resources:\n  accelerators: {V100: 1, A100: 1}\n"),
            "task.yaml:2: " + kWant);
  EXPECT_EQ(TaskErrorOf("resources:\n  accelerators: \"{V100:1, A100:1}\"\n"),
            "task.yaml:2: " + kWant);
  // Ignoring any_of as a cloud field would run the job without any GPU: refused too.
  EXPECT_THAT(
      TaskErrorOf("resources:\n  any_of:\n    - accelerators: V100\n    - accelerators: A100\n"),
      HasSubstr("task.yaml:3: resources.any_of: choosing among several accelerator types"));
}

TEST(TaskYaml, UnknownRecoveryValue) {
  EXPECT_EQ(TaskErrorOf("run: x\nrecovery:\n  on_preemption: retry\n"),
            "task.yaml:3: recovery.on_preemption: expected requeue or fail, got \"retry\"");
}

TEST(TaskYaml, ReservedEnvNamesAreRefusedAtTheirLine) {
  EXPECT_EQ(TaskErrorOf("envs:\n  LR: 1\n  BERTH_NODE_RANK: 3\n"),
            "task.yaml:3: envs.BERTH_NODE_RANK is reserved: berth sets BERTH_* variables itself");
  EXPECT_EQ(TaskErrorOf("envs:\n  SKYPILOT_NUM_NODES: 3\n"),
            "task.yaml:2: envs.SKYPILOT_NUM_NODES is reserved: berth sets SKYPILOT_* variables "
            "itself");
  EXPECT_EQ(TaskErrorOf("envs: {CUDA_VISIBLE_DEVICES: 0}\n"),
            "task.yaml:1: envs.CUDA_VISIBLE_DEVICES is reserved: berth sets it to the GPUs it "
            "allocated");
  EXPECT_EQ(TaskErrorOf("envs:\n  HF_TOKEN:\n"), "task.yaml:2: envs.HF_TOKEN has no value");
  EXPECT_THAT(TaskErrorOf("envs:\n  1LR: x\n"), HasSubstr("task.yaml:2: envs.1LR is not a valid"));
}

TEST(TaskYaml, MalformedOrEmptyFiles) {
  // The bracket opened on line 2 is found unclosed on line 3.
  EXPECT_EQ(TaskErrorOf("name: x\nresources: {cpus: 2\nrun: echo\n"),
            "task.yaml:3: malformed YAML: end of map flow not found");
  EXPECT_EQ(TaskErrorOf(""), "task.yaml: empty task file");
  EXPECT_EQ(TaskErrorOf("# only a comment\n"), "task.yaml: empty task file");
  EXPECT_EQ(TaskErrorOf("- run: echo\n"),
            "task.yaml:1: a task file is a map of fields such as resources: and run:, got a list");
  EXPECT_EQ(TaskErrorOf("echo hi\n"),
            "task.yaml:1: a task file is a map of fields such as resources: and run:, got \"echo "
            "hi\"");
  EXPECT_EQ(TaskErrorOf("run: a\nrun: b\n"), "task.yaml:2: 'run' is given twice (also on line 1)");
  EXPECT_THAT(TaskErrorOf("name: a\n---\nrun: b\n"),
              HasSubstr("task.yaml:3: several YAML documents"));
  EXPECT_EQ(MustParseTask("%YAML 1.2\n---\nrun: b\n...\n").spec.run, "b");
}

// yaml-cpp 0.7's LoadAll never returns on a stray ',' (it allocates until the process dies); berth
// must answer with an error instead (jbeder/yaml-cpp#1040).
TEST(TaskYaml, StrayCommaIsAnErrorNotAHang) {
  EXPECT_EQ(TaskErrorOf(","), "task.yaml:1: malformed YAML: cannot read this line");
  EXPECT_EQ(TaskErrorOf("# task\n,ame: x\nrun: y\n"),
            "task.yaml:2: malformed YAML: cannot read this line");
  EXPECT_THAT(TaskErrorOf("run: y\n---\n,\n"), HasSubstr("task.yaml:3: several YAML documents"));
  EXPECT_EQ(TaskErrorOf("~\n"),
            "task.yaml:1: a task file is a map of fields such as resources: and run:, got nothing");
}

TEST(ParseAccelerators, Forms) {
  using P = std::pair<std::string, MilliGpu>;
  EXPECT_EQ(*ParseAccelerators("V100:4"), P("V100", 4000));
  EXPECT_EQ(*ParseAccelerators("V100"), P("V100", 1000));
  EXPECT_EQ(*ParseAccelerators("T4:0.5"), P("T4", 500));
  EXPECT_EQ(*ParseAccelerators(" H100 : 8 "), P("H100", 8000));
}

TEST(ParseAccelerators, Errors) {
  auto error = [](const std::string& s) {
    auto r = ParseAccelerators(s);
    EXPECT_FALSE(r.ok()) << s;
    return r.ok() ? "" : r.status().message();
  };
  EXPECT_THAT(error(":4"), HasSubstr("expected an accelerator type"));
  EXPECT_THAT(error(""), HasSubstr("expected an accelerator type"));
  EXPECT_THAT(error("V100:0"), HasSubstr("must be positive"));
  EXPECT_THAT(error("V100:-2"), HasSubstr("must be positive"));
  EXPECT_EQ(error("V100:four"), "expected a GPU count like V100:4 or V100:0.5, got \"four\"");
  EXPECT_EQ(error("V100:1.5"), "more than one GPU must be a whole number, got 1.5");
  EXPECT_EQ(error("V100:5000"), "at most 1024 GPUs per node, got 5000");
  EXPECT_EQ(error("V100:99999999999999999"), "at most 1024 GPUs per node, got 99999999999999999");
  EXPECT_THAT(error("T4:0.0001"), HasSubstr("at most three decimals"));
  EXPECT_THAT(error("V 100:1"), HasSubstr("not a valid accelerator type"));
}

// Nesting is bounded (yaml-cpp recurses per level): a deep file is refused naming the limit and
// the line, while scripts full of brackets in block scalars are text, not nesting.
TEST(TaskYaml, DeepNestingIsRefusedWithTheLimit) {
  std::string deep = "run: echo hi\nenvs: " + std::string(5000, '[') + std::string(5000, ']');
  EXPECT_THAT(TaskErrorOf(deep), HasSubstr("task.yaml:2: nested too deep"));
  EXPECT_THAT(TaskErrorOf(deep), HasSubstr("at most 64"));
  std::string under_the_guard =
      "run: echo hi\nenvs: " + std::string(100, '[') + std::string(100, ']');
  EXPECT_THAT(TaskErrorOf(under_the_guard), HasSubstr("task.yaml:2: nested too deep"));
  // A quote in a plain key does not hide the brackets after it.
  std::string quoted = "run: echo hi\nx'y: " + std::string(100, '[') + std::string(100, ']');
  EXPECT_THAT(TaskErrorOf(quoted), HasSubstr("at most 64"));
  std::string indented = "run: x\nenvs:\n";
  for (int i = 0; i < 70; ++i)
    indented += std::string(static_cast<size_t>(2 * i + 2), ' ') + "a:\n";
  EXPECT_THAT(TaskErrorOf(indented), HasSubstr("at most 64"));

  std::string script = "run: |\n";
  for (int i = 0; i < 100; ++i) script += "  if [ -e x ]; then { echo '['; }; fi\n";
  script += "  echo " + std::string(100, '{') + "\n";
  script += "setup: >-\n  " + std::string(100, '[') + "\nname: ok\n";
  script = "workdir: test [ -f x\n" + script;  // an unbalanced bracket in a plain scalar
  EXPECT_EQ(MustParseTask(script).spec.name, "ok");
}

// resources.cpu_binding: cores pins whole CPUs, so it needs a whole number of them; it goes
// through the JSON the server stores and the agent reads.
TEST(TaskYaml, CpuBindingPinsWholeCpus) {
  ParsedTask t = MustParseTask("resources:\n  cpus: 2\n  cpu_binding: cores\nrun: x\n");
  EXPECT_EQ(t.spec.cpu_binding, CpuBinding::kCores);
  EXPECT_EQ(MustParseTask("resources: {cpu_binding: none}\n").spec.cpu_binding, CpuBinding::kNone);
  EXPECT_EQ(MustParseTask("run: x\n").spec.cpu_binding, CpuBinding::kNone);
  auto back = SpecFromJson(SpecToJson(t.spec));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->cpu_binding, CpuBinding::kCores);
  EXPECT_EQ(TaskErrorOf("resources:\n  cpus: 2\n  cpu_binding: threads\n"),
            "task.yaml:3: resources.cpu_binding: expected cores or none, got \"threads\"");
  EXPECT_THAT(TaskErrorOf("resources:\n  cpus: 1.5\n  cpu_binding: cores\n"),
              HasSubstr("resources.cpu_binding: cores pins whole CPUs; ask for a whole number of "
                        "them in resources.cpus, not 1.5"));
  // The default half CPU cannot be pinned either.
  EXPECT_THAT(TaskErrorOf("resources:\n  cpu_binding: cores\n"), HasSubstr("not 0.5"));
}

}  // namespace
}  // namespace berth

namespace berth {
namespace {

TEST(TaskYaml, ImageIdAndContainerBlock) {
  auto task = ParseTaskYaml(
      "run: python train.py\n"
      "resources:\n  image_id: docker:nvcr.io/nvidia/pytorch:24.05-py3\n"
      "container:\n  mounts: [\"/datasets:/datasets:ro\"]\n  pull: always\n  remap_root: true\n",
      "task.yaml");
  ASSERT_TRUE(task.ok()) << task.status().message();
  ASSERT_TRUE(task->spec.container);
  EXPECT_EQ(task->spec.container->image, "nvcr.io/nvidia/pytorch:24.05-py3");
  EXPECT_EQ(task->spec.container->mounts, std::vector<std::string>{"/datasets:/datasets:ro"});
  EXPECT_EQ(task->spec.container->pull, PullPolicy::kAlways);
  EXPECT_TRUE(task->spec.container->remap_root);
  EXPECT_TRUE(task->warnings.empty());
  // A SkyPilot task unchanged: image_id alone, pinned by digest.
  auto pinned = ParseTaskYaml(
      "run: x\nresources:\n  image_id: docker:busybox@sha256:" + std::string(64, 'a') + "\n",
      "task.yaml");
  ASSERT_TRUE(pinned.ok()) << pinned.status().message();
  EXPECT_EQ(pinned->spec.container->pull, PullPolicy::kMissing);
  EXPECT_TRUE(pinned->spec.container->mounts.empty());
}

TEST(TaskYaml, ContainerErrorsNameTheLine) {
  auto ami = ParseTaskYaml("run: x\nresources:\n  image_id: ami-12345\n", "task.yaml");
  ASSERT_TRUE(ami.ok()) << ami.status().message();
  EXPECT_FALSE(ami->spec.container);
  ASSERT_EQ(ami->warnings.size(), 1u);
  EXPECT_EQ(ami->warnings[0],
            "task.yaml:3: resources.image_id: only docker:IMAGE runs on berth (a container "
            "image); \"ami-12345\" is a cloud's machine image; ignored");
  EXPECT_EQ(TaskErrorOf("run: x\ncontainer:\n  pull: always\n"),
            "task.yaml:3: container: says how to run an image, but no image is named; add "
            "resources.image_id: docker:IMAGE");
  EXPECT_NE(TaskErrorOf("run: x\nresources:\n  image_id: docker:-rm\n")
                .find("task.yaml:3: "
                      "resources.image_id: "
                      "'-rm' is not an image "
                      "reference"),
            std::string::npos);
  EXPECT_NE(TaskErrorOf("run: x\nresources:\n  image_id: docker:x\ncontainer:\n  mounts: "
                        "[\"data:/data\"]\n")
                .find("container.mounts: 'data:/data': paths must be absolute"),
            std::string::npos);
  EXPECT_NE(TaskErrorOf("run: x\nresources:\n  image_id: docker:x\ncontainer:\n  pull: sometimes\n")
                .find("task.yaml:5: container.pull: expected missing, always or never"),
            std::string::npos);
  EXPECT_NE(TaskErrorOf("run: x\nresources:\n  image_id: docker:x\ncontainer:\n  mount: []\n")
                .find("did you mean 'mounts'"),
            std::string::npos);
  EXPECT_NE(TaskErrorOf("run: x\nresources:\n  image_id: docker:x\nfile_mounts:\n  /data: ./d\n")
                .find("with an image, targets go in the workdir or ~"),
            std::string::npos);
}

}  // namespace
}  // namespace berth

namespace berth {
namespace {

TEST(TaskYaml, PlacementTopologyNamesItsLevelsAndBadOnesTheirLine) {
  ParsedTask t = MustParseTask(
      "num_nodes: 4\nplacement:\n  topology: {required: rack, preferred: switch}\nrun: x\n");
  EXPECT_EQ(t.spec.topology_required, "rack");
  EXPECT_EQ(t.spec.topology_preferred, "switch");
  EXPECT_EQ(
      MustParseTask("placement: {topology: {preferred: switch}}\nrun: x\n").spec.topology_required,
      "");
  EXPECT_THAT(TaskErrorOf("run: x\nplacement:\n  topology: {requird: rack}\n"),
              ::testing::HasSubstr("task.yaml:3: placement.topology: unknown field 'requird'"));
}

}  // namespace
}  // namespace berth
