// RelayTransport: mails through net/smtp_client.h, webhooks through net/http_client.h.
#include "server/notify/notice_transport.h"

namespace berth {

Status RelayTransport::SendMail(const net::MailMessage& mail) {
  if (options_.smtp.host.empty()) {
    return Status::Infeasible(
        "this server has no mail relay (berth server --smtp HOST:PORT --smtp-from ADDR)");
  }
  net::SmtpOptions smtp = options_.smtp;
  smtp.timeout_ms = options_.timeout_ms;
  return net::SendMail(smtp, mail);
}

Status RelayTransport::Post(const std::string& url, const std::string& body,
                            const net::HttpHeaders& headers) {
  // "https://host:port/path?query": the client's base is up to the path.
  const size_t scheme = url.find("://");
  const size_t slash = scheme == std::string::npos ? std::string::npos : url.find('/', scheme + 3);
  const std::string base = slash == std::string::npos ? url : url.substr(0, slash);
  const std::string target = slash == std::string::npos ? "/" : url.substr(slash);
  net::HttpClientOptions options;
  options.ca_file = options_.webhook_ca_file;
  net::HttpClient client(base, options);
  Result<net::HttpResponse> response =
      client.Request("POST", target, body, options_.timeout_ms, headers);
  if (!response.ok()) return Status::Unavailable("webhook: " + response.status().message());
  const int code = response->status;
  if (code >= 200 && code < 300) return Status::Ok();
  std::string text = response->body.substr(0, 200);
  const std::string why = "webhook: " + url + " answered HTTP " + std::to_string(code) +
                          (text.empty() ? "" : ": " + text);
  // A receiver's 4xx means the request itself is wrong (but for a timeout or a rate limit): a
  // retry would get the same answer.
  if (code >= 400 && code < 500 && code != 408 && code != 429) {
    return Status::Infeasible(why);
  }
  return Status::Unavailable(why);
}

}  // namespace berth
