#include "src/runtime/lt_matmul.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "src/runtime/cuda_status.h"
#include "src/runtime/owners.h"
#include "src/util/status_macros.h"

namespace reprise::runtime {
namespace {

// cuBLASLt's heuristic assumes 256-byte aligned operands unless told otherwise.
constexpr uintptr_t kAlignment = 256;

struct PreferenceDeleter {
  void operator()(cublasLtMatmulPreference_t preference) const {
    (void)cublasLtMatmulPreferenceDestroy(preference);
  }
};

std::string ShapeText(const MatmulShape& s) {
  const std::string a = s.transpose_a ? absl::StrCat("[", s.k, "x", s.m, "]^T")
                                      : absl::StrCat("[", s.m, "x", s.k, "]");
  const std::string b = s.transpose_b ? absl::StrCat("[", s.n, "x", s.k, "]^T")
                                      : absl::StrCat("[", s.k, "x", s.n, "]");
  return absl::StrCat(s.batch > 1 ? absl::StrCat(s.batch, "x") : "", a, "·", b);
}

absl::string_view EpilogueText(MatmulEpilogue::Kind kind) {
  switch (kind) {
    case MatmulEpilogue::Kind::kNone:
      return "";
    case MatmulEpilogue::Kind::kBias:
      return " +bias";
    case MatmulEpilogue::Kind::kReluBias:
      return " +bias,relu";
    case MatmulEpilogue::Kind::kReluMaskBias:
      return " +bias,relu,mask";
    case MatmulEpilogue::Kind::kDReluBiasGrad:
      return " drelu(mask),bias_grad";
    case MatmulEpilogue::Kind::kGeluAuxBias:
      return " +bias,gelu,aux";
    case MatmulEpilogue::Kind::kDGelu:
      return " dgelu(aux)";
    case MatmulEpilogue::Kind::kBiasGradB:
      return " bias_grad(A)";
    case MatmulEpilogue::Kind::kBiasResidual:
      return " +bias+residual";
  }
  return "";
}

// cuBLASLt documents its ReLU epilogues as x := max(x, 0) and says nothing of NaN; NVIDIA's
// forum ("Incorrect result of cublasLtMatmul with CUBLASLT_EPILOGUE_RELU when input is NaN",
// forums.developer.nvidia.com/t/329783) reports that they map a NaN to 0, unlike torch.relu and
// our relu op (the CPU reference keeps NaN). A fused layer therefore hides a NaN its own product
// makes. The non-finite guard (src/autodiff/non_finite_guard.h) still sees what matters: a NaN
// in the layer's input (a NaN feature) makes the layer's weight gradient dYᵀ·X NaN whatever dY
// is (NaN · 0 is NaN), and no guarded update writes a NaN into a weight.
cublasLtEpilogue_t LtEpilogue(MatmulEpilogue::Kind kind) {
  switch (kind) {
    case MatmulEpilogue::Kind::kNone:
      return CUBLASLT_EPILOGUE_DEFAULT;
    case MatmulEpilogue::Kind::kBias:
      return CUBLASLT_EPILOGUE_BIAS;
    case MatmulEpilogue::Kind::kReluBias:
      return CUBLASLT_EPILOGUE_RELU_BIAS;
    case MatmulEpilogue::Kind::kReluMaskBias:
      return CUBLASLT_EPILOGUE_RELU_AUX_BIAS;
    case MatmulEpilogue::Kind::kDReluBiasGrad:
      return CUBLASLT_EPILOGUE_DRELU_BGRAD;
    case MatmulEpilogue::Kind::kGeluAuxBias:
      return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case MatmulEpilogue::Kind::kDGelu:
      return CUBLASLT_EPILOGUE_DGELU;
    case MatmulEpilogue::Kind::kBiasGradB:
      return CUBLASLT_EPILOGUE_BGRADB;
    case MatmulEpilogue::Kind::kBiasResidual:
      return CUBLASLT_EPILOGUE_BIAS;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

bool UsesReluMask(MatmulEpilogue::Kind kind) {
  return kind == MatmulEpilogue::Kind::kReluMaskBias ||
         kind == MatmulEpilogue::Kind::kDReluBiasGrad;
}

bool UsesGeluInput(MatmulEpilogue::Kind kind) {
  return kind == MatmulEpilogue::Kind::kGeluAuxBias || kind == MatmulEpilogue::Kind::kDGelu;
}

// Every epilogue but DGELU reads or writes a bias vector.
bool UsesBias(MatmulEpilogue::Kind kind) {
  return kind != MatmulEpilogue::Kind::kNone && kind != MatmulEpilogue::Kind::kDGelu;
}

bool Aligned(const void* p) {
  return p != nullptr && reinterpret_cast<uintptr_t>(p) % kAlignment == 0;
}

}  // namespace

int64_t ReluMaskWords(int64_t n) { return (n + 127) / 128 * 4; }

void LtHandle::Deleter::operator()(cublasLtHandle_t handle) const { (void)cublasLtDestroy(handle); }

absl::StatusOr<LtHandle> LtHandle::Create() {
  cublasLtHandle_t handle = nullptr;
  CUDA_RETURN_IF_ERROR(cublasLtCreate(&handle), "new cuBLASLt handle");
  return LtHandle(handle);
}

void LtMatmul::DescDeleter::operator()(cublasLtMatmulDesc_t desc) const {
  (void)cublasLtMatmulDescDestroy(desc);
}

void LtMatmul::LayoutDeleter::operator()(cublasLtMatrixLayout_t layout) const {
  (void)cublasLtMatrixLayoutDestroy(layout);
}

// cuBLASLt is column-major, and a row-major X[r,c] in memory is the column-major X^T[c,r]. So we
// ask cuBLASLt for C^T[n,m] = op(B)^T op(A)^T: its first operand is our B and its second our A,
// each with our own transpose flag, and no data moves. (CUBLASLT_ORDER_ROW layouts would say the
// same thing but reach fewer kernels.) In cuBLASLt's terms: M = n, N = m, K = k.
absl::StatusOr<LtMatmul> LtMatmul::Create(const LtHandle& handle, MatmulShape shape,
                                          bool allow_tf32, size_t workspace_bytes,
                                          MatmulEpilogue epilogue, int candidates) {
  const std::string context =
      absl::StrCat("matmul ", ShapeText(shape), EpilogueText(epilogue.kind));
  if (shape.m <= 0 || shape.n <= 0 || shape.k <= 0 || shape.batch <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(context, ": dimensions must be positive"));
  }
  if (shape.dtype != DType::kFloat32 && !IsLowPrecision(shape.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        context, ": operands must be float32, bfloat16 or float16, not ", DTypeName(shape.dtype)));
  }
  // 16-bit operands run on tensor cores, accumulating in float32, whatever allow_tf32 says.
  const bool low_precision = IsLowPrecision(shape.dtype);
  const cudaDataType_t data_type = shape.dtype == DType::kBFloat16  ? CUDA_R_16BF
                                   : shape.dtype == DType::kFloat16 ? CUDA_R_16F
                                                                    : CUDA_R_32F;
  if (UsesBias(epilogue.kind) &&
      (epilogue.bias == nullptr || reinterpret_cast<uintptr_t>(epilogue.bias) % kAlignment != 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(context, ": the bias must be non-null and 256-byte aligned"));
  }
  if (UsesReluMask(epilogue.kind) &&
      (epilogue.relu_mask == nullptr ||
       reinterpret_cast<uintptr_t>(epilogue.relu_mask) % kAlignment != 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(context, ": the ReLU mask must be non-null and 256-byte aligned"));
  }
  if (shape.batch > 1 && UsesReluMask(epilogue.kind)) {
    return absl::UnimplementedError(
        absl::StrCat(context, ": ReLU-mask epilogues are not available for batched products"));
  }
  if (UsesGeluInput(epilogue.kind)) {
    if (!Aligned(epilogue.gelu_input)) {
      return absl::InvalidArgumentError(
          absl::StrCat(context, ": the GELU input must be non-null and 256-byte aligned"));
    }
    if (shape.batch > 1 || shape.n % 8 != 0) {
      return absl::UnimplementedError(absl::StrCat(
          context, ": GELU epilogues need an unbatched product with n a multiple of 8"));
    }
  }
  if (epilogue.kind == MatmulEpilogue::Kind::kBiasGradB && shape.batch > 1) {
    return absl::UnimplementedError(
        absl::StrCat(context, ": bias-gradient epilogues are not available for batched products"));
  }
  if (epilogue.kind == MatmulEpilogue::Kind::kBiasResidual && !Aligned(epilogue.residual)) {
    return absl::InvalidArgumentError(
        absl::StrCat(context, ": the residual must be non-null and 256-byte aligned"));
  }
  LtMatmul mm;
  mm.handle_ = handle.get();
  mm.shape_ = shape;
  mm.allow_tf32_ = allow_tf32;
  mm.epilogue_ = epilogue;
  mm.workspace_limit_ = workspace_bytes;

  cublasLtMatmulDesc_t desc = nullptr;
  CUDA_RETURN_IF_ERROR(
      cublasLtMatmulDescCreate(
          &desc, allow_tf32 && !low_precision ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
          CUDA_R_32F),
      context);
  mm.desc_.reset(desc);
  const cublasOperation_t op_b = shape.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = shape.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUDA_RETURN_IF_ERROR(
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_b, sizeof(op_b)),
      context);
  CUDA_RETURN_IF_ERROR(
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_a, sizeof(op_a)),
      context);
  if (epilogue.kind != MatmulEpilogue::Kind::kNone) {
    const cublasLtEpilogue_t lt_epilogue = LtEpilogue(epilogue.kind);
    CUDA_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                        &lt_epilogue, sizeof(lt_epilogue)),
                         context);
  }
  if (UsesBias(epilogue.kind)) {
    // In cuBLASLt's column-major terms our output columns are its rows, which is the dimension
    // its bias vector runs along: the bias needs no transposition. Likewise DRELU_BGRAD's bias
    // gradient, a sum along its rows' other dimension: our batch.
    CUDA_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                        &epilogue.bias, sizeof(epilogue.bias)),
                         context);
    const cudaDataType_t bias_type = data_type;
    CUDA_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                        &bias_type, sizeof(bias_type)),
                         context);
    if (shape.batch > 1) {  // Each product its own bias of n values.
      const int64_t bias_stride = shape.n;
      CUDA_RETURN_IF_ERROR(
          cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &bias_stride,
                                         sizeof(bias_stride)),
          context);
    }
  }
  if (UsesReluMask(epilogue.kind)) {
    // The mask's leading dimension is in bits (elements of a 1-bit type): one column of the
    // column-major C^T, i.e. one of our rows, padded to 128 bits.
    const int64_t mask_ld = ReluMaskWords(shape.n) * 32;
    CUDA_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                       &epilogue.relu_mask, sizeof(epilogue.relu_mask)),
        context);
    CUDA_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                        &mask_ld, sizeof(mask_ld)),
                         context);
  }

  if (UsesGeluInput(epilogue.kind)) {
    // The sum before the GELU, in C's type and layout: one column of the column-major C^T (one of
    // our rows) every n elements.
    const int64_t aux_ld = shape.n;
    CUDA_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                       &epilogue.gelu_input, sizeof(epilogue.gelu_input)),
        context);
    CUDA_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                        &aux_ld, sizeof(aux_ld)),
                         context);
  }

  // Column-major views of our row-major buffers: rows, columns, leading dimension.
  const auto make_layout = [&](uint64_t rows, uint64_t cols, Layout& out) -> absl::Status {
    cublasLtMatrixLayout_t layout = nullptr;
    CUDA_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&layout, data_type, rows, cols, rows), context);
    out.reset(layout);
    if (shape.batch > 1) {  // Matrices stored back to back.
      const int32_t count = static_cast<int32_t>(shape.batch);
      const int64_t offset = static_cast<int64_t>(rows * cols);
      CUDA_RETURN_IF_ERROR(cublasLtMatrixLayoutSetAttribute(
                               layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)),
                           context);
      CUDA_RETURN_IF_ERROR(
          cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                           &offset, sizeof(offset)),
          context);
    }
    return absl::OkStatus();
  };
  const uint64_t m = shape.m, n = shape.n, k = shape.k;
  // B stored [k,n] is the column-major [n,k] = op(B)^T; stored [n,k] it is [k,n], transposed.
  RETURN_IF_ERROR(shape.transpose_b ? make_layout(k, n, mm.lt_a_) : make_layout(n, k, mm.lt_a_));
  // A stored [m,k] is the column-major [k,m] = op(A)^T; stored [k,m] it is [m,k], transposed.
  RETURN_IF_ERROR(shape.transpose_a ? make_layout(m, k, mm.lt_b_) : make_layout(k, m, mm.lt_b_));
  RETURN_IF_ERROR(make_layout(n, m, mm.lt_c_));

  cublasLtMatmulPreference_t raw_preference = nullptr;
  CUDA_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&raw_preference), context);
  std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, PreferenceDeleter> preference(raw_preference);
  const uint64_t max_workspace = workspace_bytes;
  CUDA_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
                           preference.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                           &max_workspace, sizeof(max_workspace)),
                       context);

  std::vector<cublasLtMatmulHeuristicResult_t> results(std::max(candidates, 1));
  int found = 0;
  CUDA_RETURN_IF_ERROR(
      cublasLtMatmulAlgoGetHeuristic(mm.handle_, desc, mm.lt_a_.get(), mm.lt_b_.get(),
                                     mm.lt_c_.get(), mm.lt_c_.get(), preference.get(),
                                     static_cast<int>(results.size()), results.data(), &found),
      context);
  for (int i = 0; i < found; ++i) {
    if (results[i].state == CUBLAS_STATUS_SUCCESS) mm.candidates_.push_back(results[i]);
  }
  if (mm.candidates_.empty()) {
    return absl::NotFoundError(absl::StrCat(context, ": cuBLASLt has no algorithm within ",
                                            workspace_bytes, " bytes of workspace"));
  }
  mm.Use(0);  // The heuristic's first choice.
  return mm;
}

void LtMatmul::Use(int candidate) {
  algo_ = candidates_[candidate].algo;
  workspace_bytes_ = candidates_[candidate].workspaceSize;  // At most the limit given to Create.
  chosen_ = candidate;
}

absl::StatusOr<std::vector<float>> LtMatmul::TimeCandidates(cudaStream_t stream, const void* a,
                                                            const void* b, void* c, void* workspace,
                                                            int repeats, int rounds) {
  ASSIGN_OR_RETURN(const Event start, Event::Create(cudaEventDefault));
  ASSIGN_OR_RETURN(const Event stop, Event::Create(cudaEventDefault));
  const int kept = chosen_;
  std::vector<std::vector<float>> per_round(candidates_.size());
  // Rounds go over all candidates in turn, so that a clock or a neighbour's change touches all.
  for (int round = 0; round < std::max(rounds, 1); ++round) {
    for (int i = 0; i < static_cast<int>(candidates_.size()); ++i) {
      Use(i);
      // A candidate cuBLASLt offers but cannot run here is passed over, not an error.
      if (!Run(stream, a, b, c, workspace).ok() || cudaStreamSynchronize(stream) != cudaSuccess) {
        (void)cudaGetLastError();
        continue;
      }
      CUDA_RETURN_IF_ERROR(cudaEventRecord(start.get(), stream), Describe());
      for (int r = 0; r < repeats; ++r) RETURN_IF_ERROR(Run(stream, a, b, c, workspace));
      CUDA_RETURN_IF_ERROR(cudaEventRecord(stop.get(), stream), Describe());
      CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop.get()), Describe());
      ASSIGN_OR_RETURN(const float ms, ElapsedMs(start, stop));
      per_round[i].push_back(ms / std::max(repeats, 1));
    }
  }
  Use(kept);
  std::vector<float> medians(candidates_.size(), std::numeric_limits<float>::infinity());
  for (size_t i = 0; i < per_round.size(); ++i) {
    std::vector<float>& t = per_round[i];
    if (t.empty()) continue;
    std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
    medians[i] = t[t.size() / 2];
  }
  return medians;
}

absl::StatusOr<float> LtMatmul::ChooseFastest(cudaStream_t stream, const void* a, const void* b,
                                              void* c, void* workspace, int repeats, int rounds) {
  ASSIGN_OR_RETURN(const std::vector<float> ms,
                   TimeCandidates(stream, a, b, c, workspace, repeats, rounds));
  const auto best = std::min_element(ms.begin(), ms.end());
  if (best == ms.end() || std::isinf(*best)) {
    return absl::InternalError(
        absl::StrCat(Describe(), ": none of cuBLASLt's ", candidates_.size(), " candidates ran"));
  }
  Use(static_cast<int>(best - ms.begin()));
  measured_ = true;
  return *best;
}

absl::Status LtMatmul::Run(cudaStream_t stream, const void* a, const void* b, void* c,
                           void* workspace) const {
  for (const void* p : {a, b, static_cast<const void*>(c)}) {
    if (p == nullptr || reinterpret_cast<uintptr_t>(p) % kAlignment != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(Describe(), ": operands must be non-null and 256-byte aligned"));
    }
  }
  if (workspace_bytes_ > 0 && workspace == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(Describe(), ": workspace is null"));
  }
  // A residual epilogue reads the residual as cuBLASLt's C (beta = 1) and writes our c as its D.
  const bool residual = epilogue_.kind == MatmulEpilogue::Kind::kBiasResidual;
  const float alpha = 1.0f;
  const float beta = residual ? 1.0f : 0.0f;
  const void* c_in = residual ? epilogue_.residual : c;
  return CudaStatus(
      cublasLtMatmul(handle_, desc_.get(), &alpha, b, lt_a_.get(), a, lt_b_.get(), &beta, c_in,
                     lt_c_.get(), c, lt_c_.get(), &algo_, workspace, workspace_bytes_, stream),
      "cublasLtMatmul", Describe());
}

std::string LtMatmul::RecordKeyText() const {
  return absl::StrCat("matmul ", ShapeText(shape_), EpilogueText(epilogue_.kind), " ",
                      DTypeName(shape_.dtype), " tf32=", allow_tf32_ ? 1 : 0,
                      " workspace_limit=", workspace_limit_);
}

std::string LtMatmul::Describe() const {
  return absl::StrCat(
      "matmul ", ShapeText(shape_), EpilogueText(epilogue_.kind),
      IsLowPrecision(shape_.dtype) ? absl::StrCat(" ", DTypeName(shape_.dtype)) : "",
      " tf32=", allow_tf32_ ? 1 : 0, " ws=", workspace_bytes_,
      from_record_ ? absl::StrCat(" measured: ", ConfigName(), " (record)")
      : measured_  ? absl::StrCat(" measured: candidate ", chosen_ + 1, " of ", candidates_.size())
                   : "");
}

}  // namespace reprise::runtime
