// LtMatmul's configurations by name: cuBLASLt's configuration space for one product beyond the
// few choices its heuristic returns (AddConfiguredCandidates), and a configuration named and
// rebuilt from its name (ConfigName, UseConfigName), as a measured choice's record keeps it.
#include <cstdint>
#include <cstring>
#include <iterator>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "src/runtime/cuda_status.h"
#include "src/runtime/lt_matmul.h"
#include "src/util/status_macros.h"

namespace reprise::runtime {
namespace {

// An algorithm capability that is an array of uint32_t (tile or stages ids); {0} (undefined:
// the algorithm picks) where it lists none.
std::vector<uint32_t> CapIds(const cublasLtMatmulAlgo_t& algo,
                             cublasLtMatmulAlgoCapAttributes_t cap) {
  size_t bytes = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&algo, cap, nullptr, 0, &bytes) != CUBLAS_STATUS_SUCCESS ||
      bytes == 0) {
    return {0};
  }
  std::vector<uint32_t> ids(bytes / sizeof(uint32_t));
  if (cublasLtMatmulAlgoCapGetAttribute(&algo, cap, ids.data(), bytes, &bytes) !=
          CUBLAS_STATUS_SUCCESS ||
      ids.empty()) {
    return {0};
  }
  return ids;
}

// The configuration attributes a name lists, in its order; each read and written as its own
// integer type.
struct ConfigField {
  absl::string_view name;
  cublasLtMatmulAlgoConfigAttributes_t attribute;
  size_t bytes;
};
constexpr ConfigField kConfigFields[] = {
    {"tile", CUBLASLT_ALGO_CONFIG_TILE_ID, sizeof(uint32_t)},
    {"stages", CUBLASLT_ALGO_CONFIG_STAGES_ID, sizeof(uint32_t)},
    {"splitk", CUBLASLT_ALGO_CONFIG_SPLITK_NUM, sizeof(int32_t)},
    {"reduction", CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, sizeof(uint32_t)},
    {"swizzle", CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, sizeof(uint32_t)},
    {"custom", CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, sizeof(uint32_t)},
    {"cluster", CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, sizeof(uint16_t)},
    {"inner", CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, sizeof(uint16_t)},
};

std::string NameOf(const cublasLtMatmulAlgo_t& algo) {
  const auto get = [&](cublasLtMatmulAlgoConfigAttributes_t attribute, size_t bytes) -> int64_t {
    uint64_t value = 0;  // Little-endian: the low bytes are the attribute's.
    size_t written = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attribute, &value, bytes, &written) !=
        CUBLAS_STATUS_SUCCESS) {
      return 0;
    }
    if (bytes == sizeof(int32_t)) return static_cast<int32_t>(value);
    return static_cast<int64_t>(value);
  };
  std::string name = absl::StrCat("algo", get(CUBLASLT_ALGO_CONFIG_ID, sizeof(int32_t)));
  for (const ConfigField& f : kConfigFields) {
    absl::StrAppend(&name, "_", f.name, get(f.attribute, f.bytes));
  }
  return name;
}

// The compute and operand types Create gave cuBLASLt for this product.
struct LtTypes {
  cublasComputeType_t compute;
  cudaDataType_t operands;
};
LtTypes TypesOf(const MatmulShape& shape, bool allow_tf32) {
  const bool low_precision = IsLowPrecision(shape.dtype);
  return {allow_tf32 && !low_precision ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
          shape.dtype == DType::kBFloat16  ? CUDA_R_16BF
          : shape.dtype == DType::kFloat16 ? CUDA_R_16F
                                           : CUDA_R_32F};
}

bool SameAlgo(const cublasLtMatmulAlgo_t& a, const cublasLtMatmulAlgo_t& b) {
  return std::memcmp(&a, &b, sizeof(a)) == 0;
}

}  // namespace

std::string LtMatmul::ConfigName() const { return NameOf(algo_); }

std::string LtMatmul::CandidateText(int candidate) const {
  if (candidate < 0 || candidate >= candidate_count()) return "no such candidate";
  const cublasLtMatmulHeuristicResult_t& r = candidates_[candidate];
  return absl::StrCat(NameOf(r.algo), " waves ", r.wavesCount, " workspace ", r.workspaceSize);
}

absl::Status LtMatmul::UseConfigName(absl::string_view name) {
  const auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat(Describe(), ": configuration name '", name, "' ", why));
  };
  const std::vector<absl::string_view> parts = absl::StrSplit(name, '_');
  if (parts.size() != 1 + std::size(kConfigFields)) return bad("has the wrong number of fields");
  // Each part is its field's name followed by a decimal integer (splitk may be negative).
  const auto number = [&](absl::string_view part, absl::string_view field, int64_t& value) -> bool {
    return absl::ConsumePrefix(&part, field) && !part.empty() && part.front() != '+' &&
           absl::SimpleAtoi(part, &value);
  };
  int64_t algo_id = 0;
  if (!number(parts[0], "algo", algo_id) || algo_id < 0 || algo_id > INT32_MAX) {
    return bad("does not start with algo<id>");
  }
  const auto [compute, type] = TypesOf(shape_, allow_tf32_);
  cublasLtMatmulAlgo_t algo;
  if (cublasLtMatmulAlgoInit(handle_, compute, CUDA_R_32F, type, type, type, type,
                             static_cast<int>(algo_id), &algo) != CUBLAS_STATUS_SUCCESS) {
    return absl::NotFoundError(
        absl::StrCat(Describe(), ": cuBLASLt has no algorithm ", algo_id, " for these types"));
  }
  for (size_t i = 0; i < std::size(kConfigFields); ++i) {
    const ConfigField& f = kConfigFields[i];
    int64_t value = 0;
    const int64_t low = f.bytes == sizeof(int32_t) && f.name == "splitk" ? INT32_MIN : 0;
    const int64_t high = f.bytes == sizeof(uint16_t) ? UINT16_MAX
                         : f.name == "splitk"        ? INT32_MAX
                                                     : UINT32_MAX;
    if (!number(parts[1 + i], f.name, value) || value < low || value > high) {
      return bad(absl::StrCat("has no valid ", f.name, "<n> in field ", i + 2));
    }
    uint64_t raw = static_cast<uint64_t>(value);  // Little-endian: the low bytes are written.
    if (cublasLtMatmulAlgoConfigSetAttribute(&algo, f.attribute, &raw, f.bytes) !=
        CUBLAS_STATUS_SUCCESS) {
      return absl::NotFoundError(
          absl::StrCat(Describe(), ": cuBLASLt refuses ", f.name, " ", value, " of ", name));
    }
  }
  cublasLtMatmulHeuristicResult_t result = {};
  if (cublasLtMatmulAlgoCheck(handle_, desc_.get(), lt_a_.get(), lt_b_.get(), lt_c_.get(),
                              lt_c_.get(), &algo, &result) != CUBLAS_STATUS_SUCCESS) {
    return absl::NotFoundError(
        absl::StrCat(Describe(), ": cuBLASLt does not run ", name, " for this product"));
  }
  if (result.workspaceSize > workspace_limit_) {
    return absl::NotFoundError(absl::StrCat(Describe(), ": ", name, " needs ", result.workspaceSize,
                                            " bytes of workspace, over ", workspace_limit_));
  }
  result.algo = algo;
  result.state = CUBLAS_STATUS_SUCCESS;
  candidates_.assign(1, result);
  Use(0);
  measured_ = true;
  from_record_ = true;
  return absl::OkStatus();
}

absl::StatusOr<int> LtMatmul::AddConfiguredCandidates(int max_candidates) {
  const auto [compute, type] = TypesOf(shape_, allow_tf32_);
  constexpr int kMaxAlgorithms = 128;
  std::vector<int> ids(kMaxAlgorithms);
  int id_count = 0;
  CUDA_RETURN_IF_ERROR(cublasLtMatmulAlgoGetIds(handle_, compute, CUDA_R_32F, type, type, type,
                                                type, kMaxAlgorithms, ids.data(), &id_count),
                       Describe());
  const uint16_t clusters[] = {CUBLASLT_CLUSTER_SHAPE_1x1x1, CUBLASLT_CLUSTER_SHAPE_2x1x1,
                               CUBLASLT_CLUSTER_SHAPE_1x2x1, CUBLASLT_CLUSTER_SHAPE_AUTO};
  int added = 0;
  for (int i = 0; i < id_count; ++i) {
    cublasLtMatmulAlgo_t base;
    if (cublasLtMatmulAlgoInit(handle_, compute, CUDA_R_32F, type, type, type, type, ids[i],
                               &base) != CUBLAS_STATUS_SUCCESS) {
      continue;  // Not for these types.
    }
    for (uint32_t tile : CapIds(base, CUBLASLT_ALGO_CAP_TILE_IDS)) {
      for (uint32_t stages : CapIds(base, CUBLASLT_ALGO_CAP_STAGES_IDS)) {
        for (uint16_t cluster : clusters) {
          if (static_cast<int>(candidates_.size()) >= max_candidates) return added;
          cublasLtMatmulAlgo_t algo = base;
          // An attribute the algorithm does not have is refused here or by the check below.
          if (cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile,
                                                   sizeof(tile)) != CUBLAS_STATUS_SUCCESS ||
              cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages,
                                                   sizeof(stages)) != CUBLAS_STATUS_SUCCESS ||
              cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID,
                                                   &cluster,
                                                   sizeof(cluster)) != CUBLAS_STATUS_SUCCESS) {
            continue;
          }
          cublasLtMatmulHeuristicResult_t result = {};
          if (cublasLtMatmulAlgoCheck(handle_, desc_.get(), lt_a_.get(), lt_b_.get(), lt_c_.get(),
                                      lt_c_.get(), &algo, &result) != CUBLAS_STATUS_SUCCESS ||
              result.workspaceSize > workspace_limit_) {
            continue;
          }
          bool known = false;
          for (const cublasLtMatmulHeuristicResult_t& c : candidates_) {
            known = known || SameAlgo(c.algo, algo);
          }
          if (known) continue;
          result.algo = algo;
          result.state = CUBLAS_STATUS_SUCCESS;
          candidates_.push_back(result);
          ++added;
        }
      }
    }
  }
  return added;
}

}  // namespace reprise::runtime
