// PgStore: operators' reservations (as store/sqlite_reservations.cpp).
#include <string>
#include <vector>

#include "store/pg_store.h"

namespace berth {

void PgStore::AddReservationCalls(const Batch& batch, std::vector<PgCall>& calls) {
  for (const ReservationRow& r : batch.reservations) {
    PgCall call;
    call.sql =
        "INSERT INTO reservations(name, spec, created_at, updated_at, updated_by) "
        "VALUES ($1, $2, $3, $4, $5) ON CONFLICT (name) DO UPDATE SET spec = excluded.spec, "
        "updated_at = excluded.updated_at, updated_by = excluded.updated_by";
    call.params.Add(r.name).Add(r.spec).Add(r.created_at).Add(r.updated_at).Add(r.updated_by);
    calls.push_back(std::move(call));
  }
  for (const std::string& name : batch.reservation_deletes) {
    PgCall call;
    call.sql = "DELETE FROM reservations WHERE name = $1";
    call.params.Add(name);
    calls.push_back(std::move(call));
  }
}

Result<std::vector<ReservationRow>> PgStore::LoadReservations() {
  MutexLock lock(read_mu_);
  Result<PgResult> s = read_db_->Query(
      "SELECT name, spec, created_at, updated_at, updated_by FROM reservations "
      "ORDER BY name COLLATE \"C\"");
  if (!s.ok()) return s.status();
  std::vector<ReservationRow> rows;
  for (int r = 0; r < s->rows(); ++r) {
    rows.push_back(ReservationRow{.name = s->Text(r, 0),
                                  .spec = s->Text(r, 1),
                                  .created_at = s->Int(r, 2),
                                  .updated_at = s->Int(r, 3),
                                  .updated_by = s->Text(r, 4)});
  }
  return rows;
}

}  // namespace berth
