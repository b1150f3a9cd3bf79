// What the kernel cache tests share: a temporary folder that removes itself, small file helpers,
// and the ways an on-disk entry gets damaged.
#ifndef REPRISE_TESTS_CPU_CACHE_TEST_UTIL_H_
#define REPRISE_TESTS_CPU_CACHE_TEST_UTIL_H_

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "src/runtime/cache_entry.h"
#include "src/runtime/sha256.h"

namespace reprise::testing {

// A fresh folder under ::testing::TempDir(), named for the running test, removed on destruction.
class ScopedTempDir {
 public:
  ScopedTempDir() {
    const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = absl::StrCat(test != nullptr ? test->name() : "test", "_XXXXXX");
    for (char& c : name) {
      if (c == '/') c = '_';
    }
    std::string root = ::testing::TempDir();
    while (root.size() > 1 && root.back() == '/') root.pop_back();
    std::string pattern = absl::StrCat(root, "/reprise_", name);
    if (::mkdtemp(pattern.data()) == nullptr) ADD_FAILURE() << "mkdtemp " << pattern;
    path_ = pattern;
  }
  ~ScopedTempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

inline void WriteFile(const std::string& path, absl::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

inline bool Exists(const std::string& path) {
  std::error_code ignored;
  return std::filesystem::exists(path, ignored);
}

inline void SetLastUse(const std::string& path, absl::Time time) {
  const timespec when = absl::ToTimespec(time);
  const timespec times[2] = {when, when};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0) << path;
}

inline absl::Time LastUse(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return absl::InfinitePast();
  return absl::TimeFromTimespec(st.st_mtim);
}

// A hex SHA-256 to use as a key in tests that do not involve the kernel store.
inline std::string TestKey(absl::string_view label) {
  return runtime::ToHex(runtime::Sha256(label));
}

enum class Damage {
  kTruncated,       // The writer's data stopped short.
  kPayloadBitFlip,  // One bit of the CUBIN changed.
  kHeaderBitFlip,   // One bit of the key field changed.
  kWrongVersion,    // Written by another format version (with its own good checksum).
  kWrongKey,        // A good entry for another key, renamed to this one's name.
  kUnreadable,      // A folder where the file should be.
};

inline std::string DamageName(Damage damage) {
  switch (damage) {
    case Damage::kTruncated:
      return "Truncated";
    case Damage::kPayloadBitFlip:
      return "PayloadBitFlip";
    case Damage::kHeaderBitFlip:
      return "HeaderBitFlip";
    case Damage::kWrongVersion:
      return "WrongVersion";
    case Damage::kWrongKey:
      return "WrongKey";
    case Damage::kUnreadable:
      return "Unreadable";
  }
  return "?";
}

inline constexpr Damage kAllDamage[] = {Damage::kTruncated,     Damage::kPayloadBitFlip,
                                        Damage::kHeaderBitFlip, Damage::kWrongVersion,
                                        Damage::kWrongKey,      Damage::kUnreadable};

// Damages the good entry file at `path` in place.
inline void DamageEntry(const std::string& path, Damage damage) {
  std::string bytes = ReadFile(path);
  ASSERT_GT(bytes.size(), runtime::kCacheEntryHeaderBytes + runtime::kCacheEntryChecksumBytes);
  switch (damage) {
    case Damage::kTruncated:
      bytes.resize(bytes.size() / 2);
      break;
    case Damage::kPayloadBitFlip:
      bytes[runtime::kCacheEntryHeaderBytes +
            (bytes.size() - runtime::kCacheEntryHeaderBytes) / 2] ^= 0x10;
      break;
    case Damage::kHeaderBitFlip:
      bytes[12 + 5] ^= 0x01;  // Inside the key field.
      break;
    case Damage::kWrongVersion: {
      bytes[8] = static_cast<char>(runtime::kCacheEntryVersion + 1);
      const std::string body = bytes.substr(0, bytes.size() - runtime::kCacheEntryChecksumBytes);
      const runtime::Sha256Digest digest = runtime::Sha256(body);
      bytes = body + std::string(reinterpret_cast<const char*>(digest.data()), digest.size());
      break;
    }
    case Damage::kWrongKey: {
      absl::StatusOr<runtime::KernelBinary> binary = runtime::DecodeCacheEntry(bytes, "");
      ASSERT_TRUE(binary.ok()) << binary.status();
      bytes = runtime::EncodeCacheEntry(TestKey("some other kernel"), *binary);
      break;
    }
    case Damage::kUnreadable:
      ASSERT_EQ(::unlink(path.c_str()), 0);
      ASSERT_EQ(::mkdir(path.c_str(), 0755), 0);
      WriteFile(path + "/inside", "x");
      return;
  }
  WriteFile(path, bytes);
}

}  // namespace reprise::testing

#endif  // REPRISE_TESTS_CPU_CACHE_TEST_UTIL_H_
