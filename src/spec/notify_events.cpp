// NotifyEvents: parsing and printing of a job's notification events.
#include "spec/notify_events.h"

#include "common/clock.h"
#include "common/strings.h"

namespace berth {

namespace {

constexpr const char* kEventList =
    "started, end, fail, oom, preempted, idle, pending>DURATION, each (and for an operator's "
    "defaults, nodes)";

Status SetEvent(const std::string& word, NotifyEvents& events) {
  if (word.rfind("pending>", 0) == 0) {
    std::optional<DurationMs> after = ParseDuration(word.substr(8));
    if (!after || *after <= 0) {
      return Status::Invalid("notify: '" + word +
                             "' needs a positive duration after 'pending>', e.g. pending>2h");
    }
    events.pending_after = *after;
    return Status::Ok();
  }
  if (word == "started") {
    events.started = true;
  } else if (word == "end") {
    events.end = true;
  } else if (word == "fail") {
    events.fail = true;
  } else if (word == "oom") {
    events.oom = true;
  } else if (word == "preempted") {
    events.preempted = true;
  } else if (word == "idle") {
    events.idle = true;
  } else if (word == "nodes") {
    events.nodes = true;
  } else if (word == "each") {
    events.each = true;
  } else {
    return Status::Invalid("notify: unknown event '" + word + "'; the events are " + kEventList);
  }
  return Status::Ok();
}

}  // namespace

Result<NotifyEvents> ParseNotifyEvents(const std::string& text) {
  NotifyEvents events;
  if (text.size() > 200) return Status::Invalid("notify: at most 200 characters");
  for (const std::string& part : Split(text, ',')) {
    const std::string word = Trim(part);
    if (word.empty()) continue;
    BERTH_RETURN_IF_ERROR(SetEvent(word, events));
  }
  if (events.each && !events.any() && !events.nodes) {
    return Status::Invalid("notify: 'each' needs events to send, e.g. end,fail,each");
  }
  return events;
}

std::string FormatNotifyEvents(const NotifyEvents& events) {
  std::string out;
  auto add = [&out](const std::string& word) {
    if (!out.empty()) out += ',';
    out += word;
  };
  if (events.started) add("started");
  if (events.end) add("end");
  if (events.fail) add("fail");
  if (events.oom) add("oom");
  if (events.preempted) add("preempted");
  if (events.idle) add("idle");
  if (events.pending_after) add("pending>" + FormatDuration(*events.pending_after));
  if (events.each) add("each");
  if (events.nodes) add("nodes");
  return out;
}

}  // namespace berth
