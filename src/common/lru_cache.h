// LruCache: a map with a capacity that forgets its least recently used entry when a new one would
// exceed it (LevelDB's ShardedLRUCache, without the shards). Long-lived processes keep their
// caches here so that memory tracks live work, not history.
//
// Thread-safety: none; the owner's lock guards it.
#pragma once

#include <cstddef>
#include <list>
#include <map>
#include <utility>

namespace berth {

template <typename Key, typename Value>
class LruCache {
 public:
  // `capacity` >= 1 entries.
  explicit LruCache(size_t capacity) : capacity_(capacity < 1 ? 1 : capacity) {}

  // The value of `key` (made the most recently used), or nullptr. The pointer is valid until the
  // next change of the cache.
  Value* Find(const Key& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second);
    return &it->second->second;
  }

  // Sets `key` to `value` (the most recently used), evicting the least recently used entry when
  // the cache is full.
  Value& Put(const Key& key, Value value) {
    if (Value* found = Find(key)) {
      *found = std::move(value);
      return *found;
    }
    if (index_.size() >= capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
    order_.emplace_front(key, std::move(value));
    index_.emplace(key, order_.begin());
    return order_.front().second;
  }

  void Erase(const Key& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return;
    order_.erase(it->second);
    index_.erase(it);
  }

  void Clear() {
    index_.clear();
    order_.clear();
  }
  size_t size() const { return index_.size(); }
  size_t capacity() const { return capacity_; }

 private:
  using Entry = std::pair<Key, Value>;
  const size_t capacity_;
  std::list<Entry> order_;  // most recently used first
  std::map<Key, typename std::list<Entry>::iterator> index_;
};

}  // namespace berth
