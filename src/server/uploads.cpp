// The server's uploads: blobs in, manifests checked, blobs out to the nodes (server/uploads.h).
#include "server/uploads.h"

#include <fmt/format.h>

#include <map>

#include "common/sha256.h"
#include "upload/blob_frames.h"
#include "upload/digest.h"

namespace berth {
namespace {

// A manifest is at most this big (200,000 entries of a long path each).
constexpr int64_t kMaxManifestBytes = 64 << 20;

}  // namespace

Uploads::Uploads(std::unique_ptr<BlobStore> blobs, upload::ManifestLimits limits, UploadQuota quota)
    : blobs_(std::move(blobs)), limits_(limits), quota_(quota) {}

Status Uploads::CheckRoom(const std::string& user, int64_t incoming) {
  if (std::optional<int64_t> free = blobs_->FreeBytes();
      free && *free - incoming < quota_.min_free_bytes) {
    return Status::NoSpace(fmt::format(
        "the server's upload store is nearly full ({} free; it keeps {} free for its own state): "
        "ask an operator, or try again once unused uploads expire",
        upload::HumanBytes(std::max<int64_t>(0, *free)),
        upload::HumanBytes(quota_.min_free_bytes)));
  }
  if (quota_.per_user_bytes <= 0) return Status::Ok();
  auto used = blobs_->UsedBy(user);
  if (!used.ok()) return used.status();
  if (*used + incoming > quota_.per_user_bytes) {
    return Status::TooLarge(fmt::format(
        "upload quota: {} keeps {} of uploads on the server and this would add {}, over the quota "
        "of {} per user (--upload-quota); uploads no pending or running job uses expire after "
        "--upload-retention",
        user, upload::HumanBytes(*used), upload::HumanBytes(incoming),
        upload::HumanBytes(quota_.per_user_bytes)));
  }
  return Status::Ok();
}

Result<std::vector<std::string>> Uploads::Missing(const std::string& user,
                                                  const std::vector<std::string>& digests) {
  if (digests.size() > kMaxAskedDigests) {
    return Status::TooLarge(fmt::format("ask about at most {} digests at once, not {}",
                                        kMaxAskedDigests, digests.size()));
  }
  for (const std::string& d : digests) {
    if (!upload::IsDigest(d)) return Status::Invalid("not a digest (64 hex characters): " + d);
  }
  return blobs_->Missing(user, digests);
}

Result<int64_t> Uploads::PutFrames(const std::string& user, std::string_view body) {
  auto frames = upload::ParseFrames(body);
  if (!frames.ok()) return frames.status();
  std::vector<BlobStore::Blob> blobs;
  int64_t bytes = 0;
  for (const upload::BlobFrame& f : *frames) {
    if (f.offset != 0) {
      return Status::Invalid("blob " + f.digest + ": a batch holds whole blobs (offset 0)");
    }
    if (static_cast<int64_t>(f.data.size()) > limits_.max_file_bytes) {
      return Status::TooLarge(fmt::format("blob {} is {}, over the limit of {} per file", f.digest,
                                          upload::HumanBytes(f.data.size()),
                                          upload::HumanBytes(limits_.max_file_bytes)));
    }
    blobs.push_back({f.digest, f.data});
    bytes += static_cast<int64_t>(f.data.size());
  }
  BERTH_RETURN_IF_ERROR(CheckRoom(user, bytes));
  BERTH_RETURN_IF_ERROR(blobs_->PutAll(user, blobs));
  blobs_received_ += static_cast<int64_t>(blobs.size());
  bytes_received_ += bytes;
  return static_cast<int64_t>(frames->size());
}

Result<int64_t> Uploads::PutPiece(const std::string& user, const std::string& digest,
                                  int64_t offset, std::string_view data, bool last, int64_t size) {
  if (!upload::IsDigest(digest)) return Status::Invalid("not a digest: " + digest);
  if (size > limits_.max_file_bytes) {
    return Status::TooLarge(fmt::format("blob {} is {}, over the limit of {} per file", digest,
                                        upload::HumanBytes(size),
                                        upload::HumanBytes(limits_.max_file_bytes)));
  }
  if (offset < 0 || offset + static_cast<int64_t>(data.size()) > size) {
    return Status::Invalid(fmt::format("blob {}: bytes {}..{} are outside its size {}", digest,
                                       offset, offset + static_cast<int64_t>(data.size()), size));
  }
  BERTH_RETURN_IF_ERROR(CheckRoom(user, static_cast<int64_t>(data.size())));
  auto received = blobs_->Append(user, digest, offset, data, last);
  if (received.ok()) piece_bytes_ += static_cast<int64_t>(data.size());
  if (received.ok() && last) {
    blobs_received_ += 1;
    bytes_received_ += *received;
  }
  return received;
}

Result<int64_t> Uploads::Received(const std::string& user, const std::string& digest) {
  if (!upload::IsDigest(digest)) return Status::Invalid("not a digest: " + digest);
  return blobs_->Received(user, digest);
}

Result<Uploads::Registered> Uploads::RegisterManifest(const std::string& user,
                                                      std::string_view text) {
  auto manifest = upload::ParseManifest(text, limits_);
  if (!manifest.ok()) return manifest.status();
  std::map<std::string, int64_t> sizes;  // each file's digest and the size the manifest says
  for (const upload::ManifestEntry& e : manifest->entries) {
    if (e.kind != upload::ManifestEntry::Kind::kFile) continue;
    auto [it, added] = sizes.emplace(e.digest, e.size);
    if (!added && it->second != e.size) {
      return Status::Invalid(fmt::format("the manifest gives blob {} two sizes, {} and {}",
                                         e.digest, it->second, e.size));
    }
  }
  std::vector<std::string> files;
  for (const auto& [digest, size] : sizes) files.push_back(digest);
  for (size_t at = 0; at < files.size(); at += kMaxAskedDigests) {
    std::vector<std::string> part(files.begin() + at,
                                  files.begin() + std::min(files.size(), at + kMaxAskedDigests));
    auto missing = blobs_->Missing(user, part);
    if (!missing.ok()) return missing.status();
    if (!missing->empty()) {
      return Status::Conflict(fmt::format(
          "the manifest names {} blob(s) not uploaded yet (the first: {}); upload them first",
          missing->size(), missing->front()));
    }
    auto stored = blobs_->Sizes(part);
    if (!stored.ok()) return stored.status();
    for (size_t i = 0; i < part.size(); ++i) {
      if ((*stored)[i] != sizes[part[i]]) {
        return Status::Invalid(
            fmt::format("the manifest says blob {} is {} bytes, but the one uploaded is {}",
                        part[i], sizes[part[i]], (*stored)[i]));
      }
    }
  }
  Registered out{
      .digest = Sha256Hex(text), .files = manifest->Files(), .bytes = manifest->TotalBytes()};
  BERTH_RETURN_IF_ERROR(blobs_->Put(user, out.digest, text));
  MutexLock lock(mu_);
  usable_.Put(user + "/" + out.digest, true);
  return out;
}

Status Uploads::CheckSpec(const std::string& user, const JobSpec& spec) {
  for (const std::string& manifest : UploadsOf(spec)) {
    {
      MutexLock lock(mu_);
      if (usable_.Find(user + "/" + manifest)) continue;
    }
    // Not checked since this server started: check again (the manifest is the user's, and so is
    // every file in it), as RegisterManifest did.
    auto owned = blobs_->Missing(user, {manifest});
    if (!owned.ok()) return owned.status();
    if (!owned->empty()) {
      return Status::Invalid("upload " + manifest +
                             " is not one of your uploads: upload the workdir or file mount "
                             "first (berth exec does)");
    }
    auto text = ReadWhole(manifest);
    if (!text.ok()) return text.status();
    auto registered = RegisterManifest(user, *text);
    if (!registered.ok()) return registered.status();
  }
  return Status::Ok();
}

Result<std::string> Uploads::ReadFrames(
    const std::vector<std::string>& manifests,
    const std::vector<std::pair<std::string, int64_t>>& wanted) {
  std::vector<std::shared_ptr<const std::unordered_set<std::string>>> files;
  for (const std::string& m : manifests) {
    auto f = FilesOf(m);
    if (!f.ok()) return f.status();
    files.push_back(*f);
  }
  auto allowed = [&](const std::string& digest) {
    for (size_t i = 0; i < manifests.size(); ++i) {
      if (manifests[i] == digest || files[i]->count(digest)) return true;
    }
    return false;
  };
  std::string body;
  for (const auto& [digest, offset] : wanted) {
    if (!allowed(digest)) {
      return Status::Forbidden("blob " + digest + " is in none of the job's uploads");
    }
    if (body.size() >= kMaxReadBytes) break;
    auto data = blobs_->Read(digest, offset, kMaxReadBytes - body.size());
    if (!data.ok()) return data.status();
    upload::AppendFrame(body, digest, offset, *data);
  }
  return body;
}

Result<int64_t> Uploads::Collect(const std::set<std::string>& live_manifests, TimeMs before,
                                 TimeMs pieces_before) {
  std::vector<std::shared_ptr<const std::unordered_set<std::string>>> files;
  for (const std::string& m : live_manifests) {
    auto f = FilesOf(m);
    // A live manifest that cannot be read now: keep everything this time.
    if (!f.ok()) return f.status();
    files.push_back(*f);
  }
  auto live = [&](const std::string& digest) {
    if (live_manifests.count(digest)) return true;
    for (const auto& f : files) {
      if (f->count(digest)) return true;
    }
    return false;
  };
  auto collected = blobs_->Collect(live, before, pieces_before);
  if (collected.ok() && *collected > 0) {
    // What was checked may be gone now: check again next time.
    MutexLock lock(mu_);
    usable_.Clear();
  }
  return collected;
}

Result<std::shared_ptr<const std::unordered_set<std::string>>> Uploads::FilesOf(
    const std::string& manifest) {
  {
    MutexLock lock(mu_);
    if (auto* found = files_.Find(manifest)) return *found;
  }
  auto text = ReadWhole(manifest);
  if (!text.ok()) return text.status();
  auto parsed = upload::ParseManifest(*text, limits_);
  if (!parsed.ok()) return parsed.status();
  auto set = std::make_shared<std::unordered_set<std::string>>();
  for (const upload::ManifestEntry& e : parsed->entries) {
    if (e.kind == upload::ManifestEntry::Kind::kFile) set->insert(e.digest);
  }
  MutexLock lock(mu_);
  files_.Put(manifest, set);
  return std::shared_ptr<const std::unordered_set<std::string>>(set);
}

Result<std::string> Uploads::ReadWhole(const std::string& digest) {
  auto size = blobs_->Size(digest);
  if (!size.ok()) return size.status();
  if (*size > kMaxManifestBytes) return Status::TooLarge("manifest " + digest + " is too big");
  return blobs_->Read(digest, 0, static_cast<size_t>(*size));
}

}  // namespace berth
