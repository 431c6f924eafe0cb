// The HTTP API's contract, route by route: each function returns the RouteDoc that a route's
// RouteTable::Add carries (server/http/route_doc.h), and Schemas() the objects they share
// (components/schemas). The OpenAPI description (server/http/openapi.h) is built from the route
// table, so a route and its contract are added together and cannot drift apart; docs/api.md is the
// prose beside it.
//
// Thread-safety: pure functions.
#pragma once

#include "server/http/route_doc.h"

namespace berth::api_docs {

// components/schemas: Error, Job, JobDetail, QueueRow, Group, Node, Token, User, Team, Notice,
// NotifySink, Reservation.
json::object Schemas();

// api_docs_jobs.cpp: the server's own routes, jobs, groups, queue, accounting, nodes, terminals.
RouteDoc Health();
RouteDoc Metrics();
RouteDoc OpenApi();
RouteDoc Submit();
RouteDoc ListJobs();
RouteDoc Cancel();
RouteDoc ShowJob();
RouteDoc Requeue();
RouteDoc Logs();
RouteDoc ShowGroup();
RouteDoc UpdateGroup();
RouteDoc Queue();
RouteDoc Usage();
RouteDoc Teams();
RouteDoc Nodes();
RouteDoc Drain(bool drain);
RouteDoc Attach();
RouteDoc ExecInto();
RouteDoc PortForward();

// api_docs_admin.cpp: identity, administration and the dashboard's calls.
RouteDoc Whoami();
RouteDoc ListTokens();
RouteDoc CreateToken();
RouteDoc RevokeToken();
RouteDoc CreateJoinToken();
RouteDoc RevokeNode();
RouteDoc SetNodeUsers();
RouteDoc ListUsers();
RouteDoc SetUser();
RouteDoc SetTeam();
RouteDoc Audit();
RouteDoc LoginPage();
RouteDoc SessionLogin();
RouteDoc LoginLink();
RouteDoc SessionInfo();
RouteDoc Logout();
RouteDoc Overview();
RouteDoc DashboardQueue();
RouteDoc NotifyList();
RouteDoc NotifySetSink();
RouteDoc NotifyRemoveSink();
RouteDoc NotifyTest();

// api_docs_reservations.cpp: operators' reservations.
json::value ReservationSchema();
RouteDoc ListReservations();
RouteDoc ReservationsCalendar();
RouteDoc ShowReservation();
RouteDoc CreateReservation();
RouteDoc UpdateReservation();
RouteDoc DeleteReservation();

// api_docs_nodes.cpp: uploads and the agents' protocol.
RouteDoc UploadMissing();
RouteDoc UploadBlobs();
RouteDoc UploadPiece();
RouteDoc UploadReceived();
RouteDoc UploadManifest();
RouteDoc Join();
RouteDoc GetSpec();
RouteDoc Register();
RouteDoc Heartbeat();
RouteDoc HealthReport();
RouteDoc Report();
RouteDoc LogAppend();
RouteDoc LogBatch();
RouteDoc AgentBlobs();
RouteDoc Watch();
RouteDoc AgentSession();

}  // namespace berth::api_docs
