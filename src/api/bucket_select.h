// BucketSelector: which shape bucket a batch size or a bound input belongs to, and which bucket
// the next step runs (BucketedTrainer's choices, host-only so that they are tested on the CPU).
#ifndef REPRISE_SRC_API_BUCKET_SELECT_H_
#define REPRISE_SRC_API_BUCKET_SELECT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace reprise {

class BucketSelector {
 public:
  // `batches` in any order; InvalidArgument unless they are positive and distinct.
  static absl::StatusOr<BucketSelector> Create(absl::Span<const int64_t> batches);

  const std::vector<int64_t>& batches() const { return batches_; }  // Ascending.
  std::string List() const;                                         // "32, 64, 128"
  // The position of `batch` in batches(); InvalidArgument listing the buckets if it is none.
  absl::StatusOr<int> Index(int64_t batch) const;
  // The smallest bucket of at least `rows`; OutOfRange listing the buckets when there is none,
  // InvalidArgument for rows < 1.
  absl::StatusOr<int64_t> PadToBucket(int64_t rows) const;

  // Records input `name`'s element count in each bucket (in batches() order). InvalidArgument
  // when the count changes between some buckets but not all, so no size names one bucket.
  absl::Status AddInput(const std::string& name, std::vector<int64_t> elements);
  // For `values` values bound to input `name`: the bucket of that size, or -1 for an input of
  // one size in every bucket (or an unknown one), which is bound for every bucket.
  // InvalidArgument, listing every bucket's size, when the size is no bucket's; InvalidArgument
  // when another input chose another bucket since the last step.
  absl::StatusOr<int> BucketOfInput(absl::string_view name, int64_t values) const;
  // After a successful bind for `bucket` (>= 0): the next step runs it.
  void Bound(absl::string_view name, int bucket);
  void Select(int bucket);  // The next step runs `bucket`, whatever was bound.
  void Stepped();           // A step of next() ran.
  int next() const { return next_; }
  int last() const { return last_; }  // -1 before the first step.

 private:
  struct InputSizes {
    std::vector<int64_t> elements;  // Per bucket.
    bool batched = false;           // Differs between buckets.
  };
  std::vector<int64_t> batches_;
  absl::flat_hash_map<std::string, InputSizes> inputs_;
  int next_ = 0, last_ = -1;
  std::string chosen_by_;  // The input that chose next_ since the last step; empty: none.
};

}  // namespace reprise

#endif  // REPRISE_SRC_API_BUCKET_SELECT_H_
