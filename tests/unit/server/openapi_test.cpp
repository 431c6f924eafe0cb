// The OpenAPI description (server/http/openapi.h) of the server's real route table: every route is
// described, with a success answer and the errors its shape implies, and every reference resolves.
// (Its validity as OpenAPI 3.1 and the live answers' fit: tests/integration/test_openapi.py.)
#include "server/http/openapi.h"

#include <gtest/gtest.h>

#include <functional>
#include <set>

#include "server/http/server.h"

namespace berth {
namespace {

class OpenApiTest : public ::testing::Test {
 protected:
  RouteTable table_ = Server::DescribeRoutes();
  json::object doc_ = OpenApiDocument(table_);
  const json::object& Op(const std::string& path, const std::string& method) {
    return doc_.at("paths").at(path).at(method).as_object();
  }
};

TEST_F(OpenApiTest, EveryRouteIsDescribedOnce) {
  size_t operations = 0;
  std::set<std::string> ids;
  for (const auto& [path, item] : doc_.at("paths").as_object()) {
    for (const auto& [method, op] : item.as_object()) {
      ++operations;
      const std::string id(op.at("operationId").as_string());
      EXPECT_TRUE(ids.insert(id).second) << "operationId " << id << " twice";
      EXPECT_FALSE(op.at("summary").as_string().empty()) << method << " " << path;
    }
  }
  EXPECT_EQ(operations, table_.routes().size());
  EXPECT_GE(operations, 50u);
  for (const auto& route : table_.routes()) {
    EXPECT_FALSE(route.doc.summary.empty()) << route.method << " " << route.path;
  }
}

TEST_F(OpenApiTest, ShapesImplyTheirErrors) {
  const auto& show = Op("/v1/jobs/{id}", "get");
  for (const char* status : {"200", "304", "400", "401", "403", "404", "503"}) {
    EXPECT_TRUE(show.at("responses").as_object().contains(status)) << status;
  }
  const auto& params = show.at("parameters").as_array();
  ASSERT_EQ(params.size(), 1u);
  EXPECT_EQ(params[0].at("in"), "path");
  EXPECT_EQ(params[0].at("schema").at("type"), "integer");
  // Anyone may ask for health, on the I/O thread: no 401, no 503, no security.
  const auto& health = Op("/v1/health", "get");
  EXPECT_FALSE(health.at("responses").as_object().contains("401"));
  EXPECT_FALSE(health.at("responses").as_object().contains("503"));
  EXPECT_TRUE(health.at("security").as_array().empty());
  // A submission answers 201 with the jobs, and takes a JSON body.
  const auto& submit = Op("/v1/jobs", "post");
  EXPECT_TRUE(submit.at("responses").as_object().contains("201"));
  EXPECT_TRUE(submit.contains("requestBody"));
  EXPECT_TRUE(submit.at("responses").as_object().contains("409"));
  // A WebSocket answers 101.
  EXPECT_TRUE(Op("/v1/jobs/{id}/attach", "get").at("responses").as_object().contains("101"));
  EXPECT_EQ(Op("/v1/agent/join", "post").at("security").at(0).as_object().begin()->key(),
            "joinToken");
}

TEST_F(OpenApiTest, EveryReferenceResolves) {
  const auto& schemas = doc_.at("components").at("schemas").as_object();
  int refs = 0;
  std::function<void(const json::value&)> walk = [&](const json::value& v) {
    if (v.is_array()) {
      for (const auto& e : v.as_array()) walk(e);
    } else if (v.is_object()) {
      for (const auto& [k, e] : v.as_object()) {
        if (k == "$ref") {
          ++refs;
          const std::string ref(e.as_string());
          const std::string prefix = "#/components/schemas/";
          ASSERT_TRUE(ref.starts_with(prefix)) << ref;
          EXPECT_TRUE(schemas.contains(ref.substr(prefix.size()))) << ref;
        }
        walk(e);
      }
    }
  };
  walk(doc_);
  EXPECT_GT(refs, 10);
}

}  // namespace
}  // namespace berth
