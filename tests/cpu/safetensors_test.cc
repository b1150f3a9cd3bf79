// safetensors: a round trip keeps every dtype, shape, name and byte; the layout is the reference
// implementation's to the byte; every damaged or hostile file is an error naming the file and the
// problem, never a crash; writes go through a temporary file that is renamed into place.
#include "src/util/safetensors.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cpu/cache_test_util.h"

namespace reprise::util {
namespace {

using ::reprise::testing::ReadFile;
using ::reprise::testing::ScopedTempDir;
using ::reprise::testing::WriteFile;
using ::testing::HasSubstr;

template <typename T>
std::string Bytes(std::vector<T> values) {
  std::string out(values.size() * sizeof(T), '\0');
  if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

std::vector<std::string> Listing(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// A file with `header` as given (no padding) followed by `data`.
std::string RawFile(absl::string_view header, absl::string_view data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(uint64_t{header.size()} >> 8 * i);
  return absl::StrCat(out, header, data);
}

absl::Status ParseStatus(absl::string_view header, absl::string_view data) {
  return ParseSafetensors(RawFile(header, data), "bad.safetensors").status();
}

TEST(SafetensorsTest, RoundTripKeepsEveryDTypeShapeNameAndByte) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> byte(0, 255);
  struct Case {
    std::string name;
    SafetensorsDType dtype;
    std::vector<int64_t> shape;
  };
  const std::vector<Case> cases = {
      {"fc0.weight", SafetensorsDType::kF32, {4, 3}},
      {"fc0.bias", SafetensorsDType::kF32, {4}},
      {"double", SafetensorsDType::kF64, {2, 1, 3}},
      {"rng.step", SafetensorsDType::kI32, {2}},
      {"scalar", SafetensorsDType::kI64, {}},
      {"half", SafetensorsDType::kF16, {7}},
      {"brain", SafetensorsDType::kBF16, {3, 5}},
      {"empty", SafetensorsDType::kF32, {0, 4}},
      {"empty too", SafetensorsDType::kI64, {0}},
      {"quoted \"name\"\n\u00e9", SafetensorsDType::kF32, {1}},
  };
  std::vector<std::string> data;
  std::vector<TensorView> views;
  for (const Case& c : cases) {
    int64_t bytes = SafetensorsDTypeSize(c.dtype);
    for (int64_t d : c.shape) bytes *= d;
    std::string d(bytes, '\0');
    for (char& b : d) b = static_cast<char>(byte(rng));
    data.push_back(std::move(d));
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    views.push_back({cases[i].name, cases[i].dtype, cases[i].shape, data[i]});
  }
  ScopedTempDir dir;
  const std::string path = dir.path() + "/weights.safetensors";
  ASSERT_TRUE(WriteSafetensors(path, views, {{"format", "pt"}, {"note", "x"}}).ok());

  absl::StatusOr<SafetensorsFile> file = ReadSafetensors(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->metadata, (SafetensorsMetadata{{"format", "pt"}, {"note", "x"}}));
  ASSERT_EQ(file->entries.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const SafetensorsEntry* e = file->Find(cases[i].name);
    ASSERT_NE(e, nullptr) << cases[i].name;
    EXPECT_EQ(e->dtype, cases[i].dtype) << cases[i].name;
    EXPECT_EQ(e->shape, cases[i].shape) << cases[i].name;
    EXPECT_EQ(file->Data(*e), data[i]) << cases[i].name;
  }
  EXPECT_EQ(file->Find("absent"), nullptr);
  // Entries come back in name order, and the data starts 8-byte aligned.
  for (size_t i = 1; i < file->entries.size(); ++i) {
    EXPECT_LT(file->entries[i - 1].name, file->entries[i].name);
  }
  int64_t data_start = static_cast<int64_t>(file->bytes.size());
  for (const SafetensorsEntry& e : file->entries) data_start = std::min(data_start, e.begin);
  EXPECT_EQ(data_start % 8, 0);
}

TEST(SafetensorsTest, LayoutIsTheReferenceImplementationsToTheByte) {
  const std::string b = Bytes<float>({1.0f, 2.0f});
  const std::string a = Bytes<int32_t>({7});
  // Given out of order: the file holds them by name.
  absl::StatusOr<std::string> bytes = SerializeSafetensors(
      {{"b", SafetensorsDType::kF32, {2}, b}, {"a", SafetensorsDType::kI32, {}, a}},
      {{"format", "pt"}});
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  // 138 bytes of compact JSON, padded with 6 spaces to 144 = 0x90.
  const std::string expected =
      std::string("\x90\0\0\0\0\0\0\0", 8) +
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"I32","shape":[],"data_offsets":[0,4]},)"
      R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})" +
      "      " + std::string("\x07\0\0\0", 4) + std::string("\0\0\x80\x3f", 4) +
      std::string("\0\0\0\x40", 4);
  EXPECT_EQ(*bytes, expected);

  // No metadata, no tensors: "{}" and six spaces.
  absl::StatusOr<std::string> empty = SerializeSafetensors({});
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(*empty, std::string("\x08\0\0\0\0\0\0\0{}      ", 16));
  EXPECT_TRUE(ParseSafetensors(*empty, "empty").ok());
}

TEST(SafetensorsTest, TruncatedFilesAreDataLossNamingTheFile) {
  for (size_t size : {0, 5}) {
    const absl::Status s = ParseSafetensors(std::string(size, '\0'), "short.safetensors").status();
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(s.message(), HasSubstr("short.safetensors"));
    EXPECT_THAT(s.message(), HasSubstr("8-byte header length"));
  }
  const std::string data = Bytes<float>({1, 2, 3});
  absl::StatusOr<std::string> whole =
      SerializeSafetensors({{"w", SafetensorsDType::kF32, {3}, data}});
  ASSERT_TRUE(whole.ok());
  // Every proper prefix is an error, never a crash.
  for (size_t cut = 0; cut < whole->size(); ++cut) {
    EXPECT_FALSE(ParseSafetensors(whole->substr(0, cut), "cut").ok()) << cut;
  }
  // Cut inside the data: the tensor whose bytes are missing is named.
  const absl::Status s = ParseSafetensors(whole->substr(0, whole->size() - 3), "t.st").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("t.st: tensor 'w' data_offsets [0, 12] run past the end"));
}

TEST(SafetensorsTest, HeaderLengthBeyondTheFileIsDataLoss) {
  std::string file = RawFile("{}", "");
  file[0] = static_cast<char>(200);
  absl::Status s = ParseSafetensors(file, "long.st").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("long.st: the header length 200 runs past the end"));
  file[7] = static_cast<char>(0x80);  // 2^63 + 200: no allocation, no overflow.
  s = ParseSafetensors(file, "long.st").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
}

TEST(SafetensorsTest, BadJsonIsInvalidArgument) {
  for (const char* header : {R"({"a":{"dtype":"F32",)", R"({"a" 1})", R"({"a":tru})", R"({}x)",
                             "{\"a\":\"\x01\"}", "{\"\xff\":{}}", R"({"a":"\ud800"})"}) {
    const absl::Status s = ParseStatus(header, "");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << header;
    EXPECT_THAT(s.message(), HasSubstr("bad.safetensors: header: JSON: ")) << header;
  }
  EXPECT_THAT(ParseStatus("[]", "").message(), HasSubstr("does not start with '{'"));
  // Deep nesting is refused, not recursed into until the stack runs out.
  const std::string deep = absl::StrCat(R"({"a":)", std::string(100000, '['));
  EXPECT_THAT(ParseStatus(deep, "").message(), HasSubstr("nesting too deep"));
}

TEST(SafetensorsTest, MissingOrIllTypedFieldsNameTheTensor) {
  const std::string four(4, '\0');
  struct Case {
    const char* header;
    const char* message;
  };
  for (const Case& c : std::vector<Case>{
           {R"({"w":[]})", "tensor 'w' is not an object"},
           {R"({"w":{"shape":[1],"data_offsets":[0,4]}})", "tensor 'w' has no string \"dtype\""},
           {R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})",
            "tensor 'w': dtype \"U8\" is not one of"},
           {R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", "tensor 'w' has no \"shape\""},
           {R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})",
            "tensor 'w': \"shape\" must hold non-negative integers"},
           {R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})",
            "tensor 'w': \"shape\" must hold non-negative integers"},
           {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})",
            "tensor 'w': \"data_offsets\" must be two non-negative integers"},
           {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})",
            "tensor 'w': \"data_offsets\" must be two non-negative integers"},
           {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})",
            "tensor 'w': data_offsets [4, 0] are reversed"},
           {R"({"__metadata__":{"k":1},"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
            "\"__metadata__\" entry 'k' is not a string"},
       }) {
    const absl::Status s = ParseStatus(c.header, four);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.header;
    EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("bad.safetensors: ", c.message))) << s;
  }
}

TEST(SafetensorsTest, OffsetsOutOfRangeAreDataLossNamingTheTensor) {
  const absl::Status s = ParseStatus(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                     R"("b":{"dtype":"F32","shape":[1],"data_offsets":[100,104]}})",
                                     std::string(8, '\0'));
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("tensor 'b' data_offsets [100, 104] run past the end of the "
                                     "data (8 bytes)"));
  // Offsets beyond int64 are not integers to us, and so not offsets.
  EXPECT_THAT(ParseStatus(R"({"a":{"dtype":"F32","shape":[1],)"
                          R"("data_offsets":[0,99999999999999999999]}})",
                          "")
                  .message(),
              HasSubstr("tensor 'a': \"data_offsets\" must be"));
}

TEST(SafetensorsTest, OverlapsAndGapsNameTheTensors) {
  const std::string twelve(12, '\0');
  absl::Status s = ParseStatus(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                               R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                               twelve);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("tensors 'a' [0, 8) and 'b' [4, 12) overlap"));
  // Two tensors on the same bytes.
  s = ParseStatus(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},)"
                  R"("b":{"dtype":"I32","shape":[3],"data_offsets":[0,12]}})",
                  twelve);
  EXPECT_THAT(s.message(), HasSubstr("overlap"));
  s = ParseStatus(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                  R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                  twelve);
  EXPECT_THAT(s.message(), HasSubstr("data bytes [4, 8) before tensor 'b' belong to no tensor"));
  s = ParseStatus(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", twelve);
  EXPECT_THAT(s.message(), HasSubstr("data bytes [4, 12) after the last tensor belong to no"));
}

TEST(SafetensorsTest, WrongByteCountNamesTheTensorAndBothSizes) {
  const absl::Status s =
      ParseStatus(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, 0));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              HasSubstr("tensor 'a' is F32[3] (12 bytes) but data_offsets [0, 8] hold 8"));
  // An element count past int64 is caught, not multiplied into a small number.
  EXPECT_THAT(ParseStatus(R"({"a":{"dtype":"F64","shape":[4294967296,4294967296],)"
                          R"("data_offsets":[0,0]}})",
                          "")
                  .message(),
              HasSubstr("(too many bytes)"));
}

TEST(SafetensorsTest, DuplicateNamesAreInvalidArgument) {
  const absl::Status s = ParseStatus(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                     R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                     std::string(8, '\0'));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("bad.safetensors: tensor 'a' is given twice"));
  EXPECT_THAT(ParseStatus(R"({"__metadata__":{},"__metadata__":{}})", "").message(),
              HasSubstr("\"__metadata__\" is given twice"));
}

TEST(SafetensorsTest, CorruptedHeadersNeverCrash) {
  const std::string data = Bytes<double>({1, 2});
  absl::StatusOr<std::string> whole = SerializeSafetensors(
      {{"x", SafetensorsDType::kF64, {2}, data}, {"y", SafetensorsDType::kF64, {}, data.substr(8)}},
      {{"k", "v"}});
  ASSERT_TRUE(whole.ok());
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> byte(0, 255);
  for (size_t i = 0; i < whole->size(); ++i) {
    for (int trial = 0; trial < 4; ++trial) {
      std::string damaged = *whole;
      damaged[i] = static_cast<char>(byte(rng));
      (void)ParseSafetensors(damaged, "fuzz");  // Any result but a crash.
    }
  }
}

TEST(SafetensorsTest, WriterRefusesWhatTheFormatCannotHold) {
  const std::string four(4, '\0');
  EXPECT_THAT(SerializeSafetensors({{"a", SafetensorsDType::kF32, {2}, four}}).status().message(),
              HasSubstr("tensor 'a' is F32[2] but has 4 bytes of data"));
  EXPECT_THAT(SerializeSafetensors({{"a", SafetensorsDType::kF32, {1}, four},
                                    {"a", SafetensorsDType::kI32, {1}, four}})
                  .status()
                  .message(),
              HasSubstr("tensor 'a' is given twice"));
  for (const char* name : {"", "__metadata__"}) {
    EXPECT_EQ(SerializeSafetensors({{name, SafetensorsDType::kF32, {1}, four}}).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

TEST(SafetensorsTest, WritesGoThroughATemporaryFileRenamedIntoPlace) {
  ScopedTempDir dir;
  const std::string path = dir.path() + "/w.safetensors";
  const std::string old_bytes = "old contents";
  WriteFile(path, old_bytes);
  const std::string four(4, '\0');

  // Refused before anything is written: the old file stays, nothing is added.
  EXPECT_FALSE(WriteSafetensors(path, {{"a", SafetensorsDType::kF32, {3}, four}}).ok());
  EXPECT_EQ(ReadFile(path), old_bytes);
  EXPECT_EQ(Listing(dir.path()), std::vector<std::string>{"w.safetensors"});

  // Replaced whole, with no temporary file left.
  ASSERT_TRUE(WriteSafetensors(path, {{"a", SafetensorsDType::kF32, {1}, four}}).ok());
  EXPECT_EQ(ReadFile(path), *SerializeSafetensors({{"a", SafetensorsDType::kF32, {1}, four}}));
  EXPECT_EQ(Listing(dir.path()), std::vector<std::string>{"w.safetensors"});

  // A folder is in the way: refused before anything is written, the folder left as it was.
  const std::string blocked = dir.path() + "/blocked";
  std::filesystem::create_directory(blocked);
  WriteFile(blocked + "/inside", "x");
  const absl::Status s = WriteSafetensors(blocked, {{"a", SafetensorsDType::kF32, {1}, four}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("writing ", blocked, ": is a directory")));
  EXPECT_EQ(Listing(dir.path()), (std::vector<std::string>{"blocked", "w.safetensors"}));
  EXPECT_EQ(Listing(blocked), std::vector<std::string>{"inside"});

  // No folder to write in.
  EXPECT_EQ(WriteSafetensors(dir.path() + "/none/w.safetensors", {}).code(),
            absl::StatusCode::kInternal);
}

TEST(SafetensorsTest, ReadingAMissingFileIsNotFound) {
  ScopedTempDir dir;
  const absl::Status s = ReadSafetensors(dir.path() + "/absent.safetensors").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("absent.safetensors"));
}

TEST(SafetensorsTest, ReadingANamedPipeIsRefusedAtOnceNamingTheFile) {
  ScopedTempDir dir;
  const std::string fifo = dir.path() + "/pipe.safetensors";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // No writer ever opens the pipe: a blocking open would wait forever.
  const absl::Status s = ReadSafetensors(fifo).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat(fifo, ": is a named pipe (FIFO)")));
}

TEST(SafetensorsTest, ReadingADeviceOrADirectoryIsRefusedNamingTheFile) {
  ScopedTempDir dir;
  absl::Status s = ReadSafetensors("/dev/null").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("/dev/null: is a character device"));
  s = ReadSafetensors(dir.path()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat(dir.path(), ": is a directory")));
}

TEST(SafetensorsTest, WritingOntoSomethingThatIsNotARegularFileIsRefused) {
  ScopedTempDir dir;
  const std::string four(4, '\0');
  const std::vector<TensorView> tensors = {{"a", SafetensorsDType::kF32, {1}, four}};
  // A device: refused, and the device node stays a device (as root this was /dev/null replaced).
  absl::Status s = WriteSafetensors("/dev/null", tensors);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("/dev/null: is a character device"));
  struct stat st;
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  // A named pipe: refused without blocking, still a pipe.
  const std::string fifo = dir.path() + "/pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  s = WriteSafetensors(fifo, tensors);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat(fifo, ": is a named pipe (FIFO)")));
  ASSERT_EQ(::lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  EXPECT_EQ(Listing(dir.path()), std::vector<std::string>{"pipe"});
}

TEST(SafetensorsTest, WritingThroughASymlinkReplacesItsTargetAndKeepsTheLink) {
  ScopedTempDir dir;
  std::filesystem::create_directory(dir.path() + "/runs");
  const std::string target = dir.path() + "/runs/w.safetensors";
  const std::string link = dir.path() + "/latest.safetensors";
  WriteFile(target, "old");
  std::filesystem::create_symlink("runs/w.safetensors", link);
  const std::string four(4, '\0');
  const std::vector<TensorView> tensors = {{"a", SafetensorsDType::kF32, {1}, four}};
  ASSERT_TRUE(WriteSafetensors(link, tensors).ok());
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  EXPECT_EQ(std::filesystem::read_symlink(link), "runs/w.safetensors");
  EXPECT_EQ(ReadFile(target), *SerializeSafetensors(tensors));
  EXPECT_EQ(Listing(dir.path() + "/runs"), std::vector<std::string>{"w.safetensors"});
  EXPECT_TRUE(ReadSafetensors(link).ok());  // Reads follow the link.

  // A link to a device or to nothing is refused, and stays.
  const std::string to_device = dir.path() + "/null.safetensors";
  std::filesystem::create_symlink("/dev/null", to_device);
  absl::Status s = WriteSafetensors(to_device, tensors);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("its target /dev/null is a character device"));
  const std::string dangling = dir.path() + "/dangling.safetensors";
  std::filesystem::create_symlink("absent/w.safetensors", dangling);
  s = WriteSafetensors(dangling, tensors);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat(dangling, ": the symbolic link cannot be")));
  EXPECT_TRUE(std::filesystem::is_symlink(dangling));
}

}  // namespace
}  // namespace reprise::util
