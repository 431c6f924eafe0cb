// NotifyEvents (spec/notify_events.h): `--notify end,fail,pending>2h` and a task's `notify:`.
#include "spec/notify_events.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/json_util.h"
#include "spec/job_spec.h"

namespace berth {
namespace {

using ::testing::HasSubstr;

TEST(NotifyEvents, ParsesEveryEventAndPrintsThemCanonically) {
  auto events = ParseNotifyEvents(" fail, end ,pending>90m,oom,idle,preempted,started,each");
  ASSERT_TRUE(events.ok()) << events.status().message();
  EXPECT_TRUE(events->started && events->end && events->fail && events->oom && events->preempted);
  EXPECT_TRUE(events->each && events->idle);
  EXPECT_EQ(events->pending_after, 90 * 60'000);
  EXPECT_EQ(FormatNotifyEvents(*events), "started,end,fail,oom,preempted,idle,pending>1h30m,each");
  auto again = ParseNotifyEvents(FormatNotifyEvents(*events));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *events);
  EXPECT_FALSE(ParseNotifyEvents("")->any());
}

TEST(NotifyEvents, MistakesNameTheWordAndTheEvents) {
  EXPECT_THAT(ParseNotifyEvents("end,finish").status().message(),
              HasSubstr("unknown event 'finish'; the events are started, end"));
  EXPECT_THAT(ParseNotifyEvents("pending>soon").status().message(),
              HasSubstr("positive duration after 'pending>'"));
  EXPECT_THAT(ParseNotifyEvents("pending>0s").status().message(), HasSubstr("pending>2h"));
  EXPECT_THAT(ParseNotifyEvents("each").status().message(), HasSubstr("needs events"));
}

TEST(NotifyEvents, ATaskSaysThemAsAStringOrAListAndErrorsNameTheLine) {
  auto list = ParseTaskYaml("run: x\nnotify: [fail, end]\n", "task.yaml");
  ASSERT_TRUE(list.ok()) << list.status().message();
  EXPECT_EQ(list->spec.notify, "end,fail");
  auto text = ParseTaskYaml("run: x\nnotify: end, pending>2h\n", "task.yaml");
  ASSERT_TRUE(text.ok()) << text.status().message();
  EXPECT_EQ(text->spec.notify, "end,pending>2h");
  auto bad = ParseTaskYaml("run: x\n\nnotify: [end, later]\n", "task.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("task.yaml:3: notify: unknown event 'later'"));
  auto map = ParseTaskYaml("run: x\nnotify: {end: yes}\n", "task.yaml");
  ASSERT_FALSE(map.ok());
  EXPECT_THAT(map.status().message(), HasSubstr("task.yaml:2: notify: expected events"));
  // The JSON form (the API's spec) is validated the same way.
  auto json = SpecFromJson(json::parse(R"({"run": "x", "notify": "end,never"})"));
  ASSERT_FALSE(json.ok());
  EXPECT_THAT(json.status().message(), HasSubstr("unknown event 'never'"));
}

}  // namespace
}  // namespace berth
