// FakeNoticeTransport: a NoticeTransport (server/notify/notice_transport.h) that records what it
// was asked to send and answers what the test scripted (Ok by default).
#pragma once

#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "server/notify/notice_transport.h"

namespace berth::testing {

class FakeNoticeTransport : public NoticeTransport {
 public:
  struct Post {
    std::string url;
    std::string body;
    net::HttpHeaders headers;
    std::string Header(const std::string& name) const {
      for (const auto& [k, v] : headers) {
        if (k == name) return v;
      }
      return "";
    }
  };

  Status SendMail(const net::MailMessage& mail) override {
    std::lock_guard lock(mu_);
    mails.push_back(mail);
    return Next();
  }
  Status Post(const std::string& url, const std::string& body,
              const net::HttpHeaders& headers) override {
    std::lock_guard lock(mu_);
    posts.push_back({url, body, headers});
    return Next();
  }
  // The answers of the next calls, in order; Ok once they are used up.
  void Answer(std::vector<Status> answers) {
    std::lock_guard lock(mu_);
    answers_.assign(answers.begin(), answers.end());
  }

  std::vector<net::MailMessage> mails;
  std::vector<struct Post> posts;

 private:
  Status Next() {
    if (answers_.empty()) return Status::Ok();
    Status st = answers_.front();
    answers_.pop_front();
    return st;
  }
  std::mutex mu_;
  std::deque<Status> answers_;
};

}  // namespace berth::testing
