// FakeSystemUsers: a passwd database and loopback peer table held in memory, for Identity tests.
//
//   FakeSystemUsers sys(/*own_uid=*/999);
//   sys.AddUser(1001, "alice");
//   sys.SetLoopbackPeer(40000, 1001);  // the TCP client on remote port 40000 is alice's
//
// Thread-safety: set up before use; then read-only.
#pragma once

#include <map>
#include <string>

#include "server/http/identity.h"

namespace berth::testing {

class FakeSystemUsers final : public SystemUsers {
 public:
  explicit FakeSystemUsers(uint32_t own_uid = 999) : own_uid_(own_uid) {
    names_[0] = "root";
    names_[own_uid] = "berthd";
  }
  void AddUser(uint32_t uid, const std::string& name) { names_[uid] = name; }
  void SetLoopbackPeer(int remote_port, uint32_t uid) { loopback_[remote_port] = uid; }

  std::optional<std::string> NameOf(uint32_t uid) const override {
    auto it = names_.find(uid);
    if (it == names_.end()) return std::nullopt;
    return it->second;
  }
  Result<uint32_t> LoopbackPeerUid(const net::PeerInfo& peer) const override {
    auto it = loopback_.find(peer.remote_port);
    if (it == loopback_.end()) return Status::NotFound("not a loopback peer");
    return it->second;
  }
  uint32_t OwnUid() const override { return own_uid_; }

 private:
  uint32_t own_uid_;
  std::map<uint32_t, std::string> names_;
  std::map<int, uint32_t> loopback_;
};

}  // namespace berth::testing
