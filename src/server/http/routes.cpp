#include "server/http/routes.h"

#include "common/strings.h"

namespace berth {

namespace {

int ParamCount(const RouteTable::Route& route) {
  int n = 0;
  for (const std::string& s : route.segments) n += RouteTable::IsParameter(s) ? 1 : 0;
  return n;
}

}  // namespace

void RouteTable::Add(std::string method, std::string path, RunsOn runs_on, Handler handler,
                     RouteDoc doc, Callers callers) {
  Route route{.method = std::move(method),
              .path = std::move(path),
              .segments = {},
              .runs_on = runs_on,
              .callers = callers,
              .handler = std::move(handler),
              .doc = std::move(doc)};
  route.segments = Split(route.path, '/');
  routes_.push_back(std::move(route));
}

bool RouteTable::Fits(const Route& route, const std::vector<std::string>& parts) {
  if (route.segments.size() != parts.size()) return false;
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string& s = route.segments[i];
    if (RouteTable::IsParameter(s) ? parts[i].empty() : s != parts[i]) return false;
  }
  return true;
}

RouteTable::Match RouteTable::Find(const std::string& method,
                                   const std::vector<std::string>& parts) const {
  Match match;
  for (const Route& route : routes_) {
    if (route.method != method || !Fits(route, parts)) continue;
    if (!match.route || ParamCount(route) < ParamCount(*match.route)) match.route = &route;
  }
  if (!match.route) return match;
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string& s = match.route->segments[i];
    if (!RouteTable::IsParameter(s)) continue;
    match.params.push_back(parts[i]);
    if (s != "{id}") continue;
    std::optional<int64_t> id = ParseDecimal(parts[i]);
    if (!id || *id <= 0) {
      // "/v1/jobs/{id}": a job id.
      std::string noun = i > 0 ? match.route->segments[i - 1] : "id";
      if (noun.ends_with('s')) noun.pop_back();
      match.error =
          Status::Invalid(noun + " id must be a positive integer, got '" + parts[i] + "'");
    } else {
      match.id = *id;
    }
  }
  return match;
}

std::string RouteTable::Label(const std::vector<std::string>& parts) const {
  const Route* best = nullptr;
  for (const Route& route : routes_) {
    if (!Fits(route, parts)) continue;
    if (!best || ParamCount(route) < ParamCount(*best)) best = &route;
  }
  if (best) return best->path;
  return parts.size() == 2 ? "/{asset}" : "other";
}

}  // namespace berth
