// SqliteStore: operators' reservations (docs/reservations.md).
#include <string>
#include <vector>

#include "store/sqlite_store.h"

namespace berth {

Status SqliteStore::WriteReservations(const Batch& batch) {
  for (const ReservationRow& r : batch.reservations) {
    Result<StatementRef> ref = db_->Cached(
        "INSERT INTO reservations(name, spec, created_at, updated_at, updated_by) "
        "VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT(name) DO UPDATE SET spec = excluded.spec, "
        "updated_at = excluded.updated_at, updated_by = excluded.updated_by");
    if (!ref.ok()) return ref.status();
    BERTH_RETURN_IF_ERROR((*ref)
                              ->Bind(1, r.name)
                              .Bind(2, r.spec)
                              .Bind(3, r.created_at)
                              .Bind(4, r.updated_at)
                              .Bind(5, r.updated_by)
                              .Run());
  }
  for (const std::string& name : batch.reservation_deletes) {
    Result<StatementRef> ref = db_->Cached("DELETE FROM reservations WHERE name = ?1");
    if (!ref.ok()) return ref.status();
    BERTH_RETURN_IF_ERROR((*ref)->Bind(1, name).Run());
  }
  return Status::Ok();
}

Result<std::vector<ReservationRow>> SqliteStore::LoadReservations() {
  std::lock_guard<std::mutex> lock(read_mu_);
  Result<StatementRef> ref = read_db_->Cached(
      "SELECT name, spec, created_at, updated_at, updated_by FROM reservations ORDER BY name");
  if (!ref.ok()) return ref.status();
  Statement& s = **ref;
  std::vector<ReservationRow> rows;
  Status read = s.ForEachRow([&]() -> Status {
    rows.push_back(ReservationRow{.name = s.Text(0),
                                  .spec = s.Text(1),
                                  .created_at = s.Int(2),
                                  .updated_at = s.Int(3),
                                  .updated_by = s.Text(4)});
    return Status::Ok();
  });
  if (!read.ok()) return read;
  return rows;
}

}  // namespace berth
