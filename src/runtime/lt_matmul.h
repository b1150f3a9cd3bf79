// cuBLASLt matrix products of row-major fp32, bf16 or fp16 tensors (accumulating in fp32), planned
// once and run many times.
//
// Create() does all the choosing (descriptors, layouts, the algorithm from cuBLASLt's heuristic)
// so that Run() only enqueues the product: no heuristics, no allocation, no synchronisation. That
// makes Run() safe under CUDA graph capture, and keeps one algorithm, so repeated runs give the
// same bits.
//
//   ASSIGN_OR_RETURN(LtHandle lt, LtHandle::Create());
//   ASSIGN_OR_RETURN(LtMatmul mm, LtMatmul::Create(lt, {m, n, k, false, true}, false, ws_bytes));
//   RETURN_IF_ERROR(mm.Run(stream, a, b, c, workspace));
#ifndef REPRISE_SRC_RUNTIME_LT_MATMUL_H_
#define REPRISE_SRC_RUNTIME_LT_MATMUL_H_

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "reprise/tensor.h"

namespace reprise::runtime {

// C[m,n] = op(A) op(B), all row-major and contiguous. op(A) is [m,k]: A is stored [m,k], or
// [k,m] when transpose_a. op(B) is [k,n]: B is stored [k,n], or [n,k] when transpose_b.
struct MatmulShape {
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  bool transpose_a = false;
  bool transpose_b = false;
  DType dtype = DType::kFloat32;  // Of A, B and C (and a bias): float32, bfloat16 or float16.
  // Strided batch: `batch` independent products, each operand's matrices stored one after another
  // (A's b-th at A + b·m·k elements, C's at C + b·m·n); a bias epilogue's bias[b] holds n values
  // at bias + b·n. ReLU-mask epilogues are not batched.
  int64_t batch = 1;
};

// What cuBLASLt applies to the product before storing it. The bias is a vector of n values of C's
// type (one per output column), added to every row; with kReluBias the sum then goes through
// max(·, 0).
//   kReluMaskBias  as kReluBias, and also writes a bit mask of the entries that came out
//                  positive to `relu_mask` (the forward of a hidden layer whose backward uses
//                  kDReluBiasGrad).
//   kDReluBiasGrad the backward of such a layer, fused into its data-gradient product: C =
//                  product where the mask bit is set, else 0, and `bias` RECEIVES the bias
//                  gradient, the column sums of that C (n values).
// The mask holds, for each of C's m rows, ReluMaskWords(n) 32-bit words: bit j % 32 of word j / 32
// is set when C[i, j] > 0 (cuBLASLt's bit mask of the column-major C^T, rows padded to 128 bits).
//   kGeluAuxBias   C = gelu(product + bias), cuBLASLt's GELU (the tanh form), and the sum before
//                  the GELU written to `gelu_input` ([m, n] of C's type): the forward of a layer
//                  whose backward uses kDGelu. n must be a multiple of 8.
//   kDGelu         that backward fused into its data-gradient product: C = product ·
//                  gelu'(gelu_input), no bias. (cuBLASLt's DGELU_BGRAD, which also sums C's
//                  columns, took 0.43 ms against 0.105 ms for the plain product at GPT-2 124M's
//                  [16384, 768]·[768, 3072] in bfloat16 on an H200: the column sums run apart.)
//   kBiasGradB     C = product, and `bias` RECEIVES op(A)'s sums over k (m values): a weight
//                  gradient dW = dYᵀ·X (transpose_a, A = dY stored [k, m]) that also writes its
//                  layer's bias gradient, the column sums of dY. cuBLASLt's BGRADB (its B is our
//                  A).
//   kBiasResidual  C = product + bias + residual ([m, n] of C's type, read as cuBLASLt's C
//                  operand with beta = 1; it may be C itself): a linear layer's output added to a
//                  residual stream.
struct MatmulEpilogue {
  enum class Kind : uint8_t {
    kNone,
    kBias,
    kReluBias,
    kReluMaskBias,
    kDReluBiasGrad,
    kGeluAuxBias,
    kDGelu,
    kBiasGradB,
    kBiasResidual
  };
  Kind kind = Kind::kNone;
  const void* bias = nullptr;      // Device address, 256-byte aligned; fixed for the plan's life.
  void* relu_mask = nullptr;       // kReluMaskBias and kDReluBiasGrad; 256-byte aligned, fixed.
  void* gelu_input = nullptr;      // kGeluAuxBias (written) and kDGelu (read); aligned, fixed.
  const void* residual = nullptr;  // kBiasResidual; 256-byte aligned, fixed.
};

// 32-bit words of one row of a ReLU bit mask for rows of n values: n rounded up to 128 bits.
int64_t ReluMaskWords(int64_t n);

// Owns a cuBLASLt handle; needs a current device. Must outlive every LtMatmul made with it.
class LtHandle {
 public:
  static absl::StatusOr<LtHandle> Create();
  cublasLtHandle_t get() const { return handle_.get(); }

 private:
  struct Deleter {
    void operator()(cublasLtHandle_t handle) const;
  };
  explicit LtHandle(cublasLtHandle_t handle) : handle_(handle) {}
  std::unique_ptr<cublasLtContext, Deleter> handle_;
};

class LtMatmul {
 public:
  // Plans the product. With `allow_tf32` the inputs are rounded to TF32 inside the product
  // (about 1e-3 relative error, much faster); without it the product is full fp32. The
  // algorithm chosen needs at most `workspace_bytes` of workspace. Errors: kInvalidArgument for
  // a non-positive dimension, a missing bias or a dtype other than float32, bfloat16 and float16
  // (16-bit types ignore allow_tf32: their products run on tensor cores); kNotFound when cuBLASLt
  // offers no algorithm.
  // `candidates` > 1 keeps that many of the heuristic's choices for ChooseFastest.
  static absl::StatusOr<LtMatmul> Create(const LtHandle& handle, MatmulShape shape, bool allow_tf32,
                                         size_t workspace_bytes, MatmulEpilogue epilogue = {},
                                         int candidates = 1);
  // Runs each kept candidate `repeats` times on `stream` (waiting for it) with these operands, in
  // `rounds` alternating rounds, and keeps the one of least median time, which it returns (ms per
  // run): it writes c (and the epilogue's outputs), so call it before they hold anything.
  // Candidates that fail to run are passed over; kInternal if none runs.
  absl::StatusOr<float> ChooseFastest(cudaStream_t stream, const void* a, const void* b, void* c,
                                      void* workspace, int repeats, int rounds = 1);
  // Times every kept candidate as ChooseFastest does, `rounds` times: each its median ms per run
  // (+inf where it fails to run). Writes c and the epilogue's outputs; the algorithm Run uses is
  // left as it was.
  absl::StatusOr<std::vector<float>> TimeCandidates(cudaStream_t stream, const void* a,
                                                    const void* b, void* c, void* workspace,
                                                    int repeats, int rounds = 1);
  // Adds to the candidates every configuration cuBLASLt accepts for this product beyond the
  // heuristic's (each algorithm's tiles and stages, in clusters of 1x1, 2x1 and 1x2, no split-k),
  // within Create's workspace limit, up to `max_candidates` in all: the search space for
  // TimeCandidates when the heuristic's few are not enough. Returns how many were added.
  absl::StatusOr<int> AddConfiguredCandidates(int max_candidates);
  // How many candidates are kept: the heuristic's first, best first, then any added.
  int candidate_count() const { return static_cast<int>(candidates_.size()); }
  // A kept candidate's configuration name (ConfigName's form) with cuBLASLt's wave count and the
  // workspace it needs: for benchmarks and dumps.
  std::string CandidateText(int candidate) const;

  // The configuration Run uses, named by its algorithm and each configuration attribute, e.g.
  // algo66_tile29_stages35_splitk1_reduction0_swizzle0_custom0_cluster3_inner0: what a measured
  // choice's record keeps (plan_record.h).
  std::string ConfigName() const;
  // Makes the named configuration the one Run uses, as if measured, after cuBLASLt checks it for
  // this product: kInvalidArgument for a name not of ConfigName's form, kNotFound where cuBLASLt
  // refuses the configuration or it needs more workspace than Create's limit.
  absl::Status UseConfigName(absl::string_view name);
  // Everything but the device and the library a measured choice depends on: the product, the
  // epilogue, the types and the workspace limit. For its record's key.
  std::string RecordKeyText() const;

  // Enqueues c = op(a) op(b) on `stream`. Pointers must be 256-byte aligned (as cudaMalloc and
  // the memory plan give) and `workspace` must hold workspace_bytes().
  absl::Status Run(cudaStream_t stream, const void* a, const void* b, void* c,
                   void* workspace) const;

  const MatmulShape& shape() const { return shape_; }
  // The workspace the chosen algorithm uses (at most the limit given to Create()).
  size_t workspace_bytes() const { return workspace_bytes_; }
  // E.g. "matmul [33x65]·[65x17]^T tf32=0 ws=0": for dumps and error messages.
  std::string Describe() const;

 private:
  struct DescDeleter {
    void operator()(cublasLtMatmulDesc_t desc) const;
  };
  struct LayoutDeleter {
    void operator()(cublasLtMatrixLayout_t layout) const;
  };
  using Desc = std::unique_ptr<cublasLtMatmulDescOpaque_t, DescDeleter>;
  using Layout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, LayoutDeleter>;

  LtMatmul() = default;
  void Use(int candidate);  // Makes the candidate the algorithm Run uses.

  cublasLtHandle_t handle_ = nullptr;
  MatmulShape shape_;
  bool allow_tf32_ = false;
  size_t workspace_bytes_ = 0;
  size_t workspace_limit_ = 0;  // Create's: what any candidate may use.
  MatmulEpilogue epilogue_;
  Desc desc_;
  // cuBLASLt's operands, which are ours swapped (see lt_matmul.cc): lt_a_ describes B.
  Layout lt_a_, lt_b_, lt_c_;
  cublasLtMatmulAlgo_t algo_ = {};
  std::vector<cublasLtMatmulHeuristicResult_t> candidates_;  // The heuristic's, best first.
  int chosen_ = 0;
  bool measured_ = false;     // Chosen by ChooseFastest or from a record (UseConfigName).
  bool from_record_ = false;  // By UseConfigName.
};

}  // namespace reprise::runtime

#endif  // REPRISE_SRC_RUNTIME_LT_MATMUL_H_
