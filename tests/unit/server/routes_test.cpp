// The API's route table (server/http/routes.h): templates with typed parameters, literals before
// parameters, and the template as the metrics label.
#include "server/http/routes.h"

#include <gtest/gtest.h>

#include "common/strings.h"

namespace berth {
namespace {

class RoutesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* path : {"/v1/jobs", "/v1/jobs/cancel", "/v1/jobs/{id}", "/v1/jobs/{id}/logs",
                             "/v1/nodes/{node}/drain", "/v1/specs/{id}"}) {
      const std::string method = std::string(path) == "/v1/jobs/cancel" ? "POST" : "GET";
      table_.Add(
          method, path, RunsOn::kRead,
          [path](const RouteCall&) { return net::HttpResponse{.status = 200, .body = path}; },
          RouteDoc{.summary = path});
    }
  }
  RouteTable::Match Find(const std::string& method, const std::string& path) {
    return table_.Find(method, Split(path, '/'));
  }
  RouteTable table_;
};

TEST_F(RoutesTest, ALiteralSegmentWinsOverAParameter) {
  auto cancel = Find("POST", "/v1/jobs/cancel");
  ASSERT_NE(cancel.route, nullptr);
  EXPECT_EQ(cancel.route->path, "/v1/jobs/cancel");
  EXPECT_TRUE(cancel.error.ok());
  // GET has no literal route there: the parameter route takes it, and "cancel" is no job id.
  auto show = Find("GET", "/v1/jobs/cancel");
  ASSERT_NE(show.route, nullptr);
  EXPECT_EQ(show.route->path, "/v1/jobs/{id}");
  EXPECT_EQ(show.error.message(), "job id must be a positive integer, got 'cancel'");
}

TEST_F(RoutesTest, ParametersAreTypedAndNamedInErrors) {
  auto logs = Find("GET", "/v1/jobs/42/logs");
  ASSERT_NE(logs.route, nullptr);
  EXPECT_TRUE(logs.error.ok());
  EXPECT_EQ(logs.id, 42);
  EXPECT_EQ(logs.params, std::vector<std::string>{"42"});
  EXPECT_EQ(Find("GET", "/v1/specs/0").error.message(),
            "spec id must be a positive integer, got '0'");
  EXPECT_EQ(Find("GET", "/v1/jobs/-3").error.message(),
            "job id must be a positive integer, got '-3'");
  auto drain = Find("GET", "/v1/nodes/gpu-7/drain");
  ASSERT_NE(drain.route, nullptr);
  EXPECT_EQ(drain.params, std::vector<std::string>{"gpu-7"});
  // An empty segment is no parameter; another method or shape is no route.
  EXPECT_EQ(Find("GET", "/v1/nodes//drain").route, nullptr);
  EXPECT_EQ(Find("DELETE", "/v1/jobs/1").route, nullptr);
  EXPECT_EQ(Find("GET", "/v1/jobs/1/logs/more").route, nullptr);
}

TEST_F(RoutesTest, TheTemplateLabelsARequestWhateverItsMethod) {
  EXPECT_EQ(table_.Label(Split("/v1/jobs/12345/logs", '/')), "/v1/jobs/{id}/logs");
  EXPECT_EQ(table_.Label(Split("/v1/jobs/cancel", '/')), "/v1/jobs/cancel");
  EXPECT_EQ(table_.Label(Split("/v1/nodes/n1/drain", '/')), "/v1/nodes/{node}/drain");
  EXPECT_EQ(table_.Label(Split("/app.js", '/')), "/{asset}");
  EXPECT_EQ(table_.Label(Split("/v1/nothing/here", '/')), "other");
}

}  // namespace
}  // namespace berth
