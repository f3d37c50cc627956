// Internal: an open-addressing hash map from byte strings to int32 values, with the keys packed
// in one buffer. Vocabulary and cache lookups are the hot path of encoding; std::unordered_map's
// node walk and string compares cost several times more.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace exl2 {
namespace tok {

inline uint64_t str_hash(const char * p, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xC2B2AE3D27D4EB4Full);
    while (n >= 8) {
        uint64_t v;
        std::memcpy(&v, p, 8);
        h = (h ^ (v * 0xBF58476D1CE4E5B9ull)) * 0x94D049BB133111EBull;
        h ^= h >> 29;
        p += 8;
        n -= 8;
    }
    uint64_t v = 0;
    std::memcpy(&v, p, n);
    h = (h ^ (v * 0xBF58476D1CE4E5B9ull)) * 0x94D049BB133111EBull;
    return h ^ (h >> 32);
}

class StrMap {
public:
    // Inserts key -> value unless the key is present; returns the stored value.
    int32_t insert(const char * k, size_t n, int32_t value) {
        if ((count_ + 1) * 4 > slots_.size() * 3) grow();
        uint64_t h = str_hash(k, n);
        size_t mask = slots_.size() - 1;
        for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
            Slot & s = slots_[i];
            if (s.len == kEmpty) {
                s.hash = (uint32_t)(h >> 32);
                s.off = (uint32_t)keys_.size();
                s.len = (uint32_t)n;
                s.value = value;
                keys_.append(k, n);
                count_++;
                return value;
            }
            if (s.hash == (uint32_t)(h >> 32) && s.len == n && std::memcmp(keys_.data() + s.off, k, n) == 0)
                return s.value;
        }
    }
    int32_t insert(const std::string & k, int32_t value) { return insert(k.data(), k.size(), value); }
    // Value for key, or -1.
    int32_t find(const char * k, size_t n) const {
        if (slots_.empty()) return -1;
        uint64_t h = str_hash(k, n);
        size_t mask = slots_.size() - 1;
        for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
            const Slot & s = slots_[i];
            if (s.len == kEmpty) return -1;
            if (s.hash == (uint32_t)(h >> 32) && s.len == n && std::memcmp(keys_.data() + s.off, k, n) == 0)
                return s.value;
        }
    }
    int32_t find(const std::string & k) const { return find(k.data(), k.size()); }
    size_t size() const { return count_; }
    void clear() {
        slots_.clear();
        keys_.clear();
        count_ = 0;
    }

private:
    static constexpr uint32_t kEmpty = UINT32_MAX;
    struct Slot {
        uint32_t hash = 0, off = 0, len = kEmpty;
        int32_t value = 0;
    };
    std::vector<Slot> slots_;
    std::string keys_;
    size_t count_ = 0;

    void grow() {
        std::vector<Slot> old;
        old.swap(slots_);
        slots_.assign(old.empty() ? 64 : old.size() * 2, Slot());
        size_t mask = slots_.size() - 1;
        for (const Slot & s : old) {
            if (s.len == kEmpty) continue;
            uint64_t h = str_hash(keys_.data() + s.off, s.len);
            size_t i = (size_t)h & mask;
            while (slots_[i].len != kEmpty) i = (i + 1) & mask;
            slots_[i] = s;
        }
    }
};

}  // namespace tok
}  // namespace exl2
