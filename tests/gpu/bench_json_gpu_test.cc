// reprise-bench's JSON carries every field the benchmark table needs, measured for real: the
// tool (built beside this test) runs a short graph-mode benchmark on the GPU.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "tests/cpu/json_reader.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

std::filesystem::path SelfDirectory() {
  return std::filesystem::read_symlink("/proc/self/exe").parent_path();
}

TEST(BenchJsonGpuTest, EveryFieldIsWrittenAndPlausible) {
  REPRISE_REQUIRE_GPU();
  const std::filesystem::path bench = SelfDirectory() / "reprise-bench";
  if (!std::filesystem::exists(bench)) GTEST_SKIP() << "reprise-bench is not beside this test";
  const std::string json_path = (std::filesystem::temp_directory_path() /
                                 ("reprise_bench_" + std::to_string(getpid()) + ".json"))
                                    .string();
  const std::string command = bench.string() +
                              " --depth 2 --width 64 --batch 32 --iters 30 --warmup 5 --mode graph"
                              " --fusion all --busy --json " +
                              json_path + " > /dev/null 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  std::ifstream in(json_path);
  std::stringstream text;
  text << in.rdbuf();
  std::filesystem::remove(json_path);
  auto json = testing::ParseJson(text.str());
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_FALSE((*json)["gpu"].string.empty());
  EXPECT_EQ((*json)["config"]["depth"].integer, 2);
  for (const char* row : {"graph", "graph/per-layer", "graph/unfused"}) {
    SCOPED_TRACE(row);
    const testing::JsonValue& r = (*json)["results"][row];
    ASSERT_EQ(r.type, testing::JsonValue::Type::kObject);
    EXPECT_GT(r["median_ms"].number, 0);
    EXPECT_GE(r["p90_ms"].number, r["median_ms"].number);
    EXPECT_GT(r["samples_per_s"].number, 0);
    EXPECT_GT(r["host_us_per_step"].number, 0);
    EXPECT_GE(r["launches_per_step"].integer, 2);
    EXPECT_GE(r["graph_nodes"].integer, r["launches_per_step"].integer);
    EXPECT_GT(r["arena_bytes"].integer, 0);
    EXPECT_GT(r["device_bytes"].integer, 0);
    EXPECT_GE(r["kernel_acquire_ms"].number, 0);
    EXPECT_NE(r.Find("kernels_compiled"), nullptr);
    EXPECT_NE(r.Find("kernel_disk_hits"), nullptr);
    // Null only where CUPTI is missing; a fraction of the step otherwise.
    const testing::JsonValue& busy = r["gpu_busy_fraction"];
    if (busy.type != testing::JsonValue::Type::kNull) {
      EXPECT_GT(busy.number, 0);
      EXPECT_LE(busy.number, 1.05);
    }
  }
  EXPECT_EQ((*json)["results"]["graph"]["launches_per_step"].integer, 2);  // The whole step.
}

}  // namespace
}  // namespace reprise
