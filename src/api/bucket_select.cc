#include "src/api/bucket_select.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace reprise {

absl::StatusOr<BucketSelector> BucketSelector::Create(absl::Span<const int64_t> batches) {
  if (batches.empty()) return absl::InvalidArgumentError("shape buckets need a batch size");
  BucketSelector selector;
  selector.batches_.assign(batches.begin(), batches.end());
  std::sort(selector.batches_.begin(), selector.batches_.end());
  for (size_t i = 0; i < selector.batches_.size(); ++i) {
    if (selector.batches_[i] < 1 || (i > 0 && selector.batches_[i] == selector.batches_[i - 1])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bucket batch sizes must be positive and distinct, got ", absl::StrJoin(batches, ", ")));
    }
  }
  return selector;
}

std::string BucketSelector::List() const { return absl::StrJoin(batches_, ", "); }

absl::StatusOr<int> BucketSelector::Index(int64_t batch) const {
  auto it = std::find(batches_.begin(), batches_.end(), batch);
  if (it == batches_.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch ", batch, " is no bucket; the buckets are ", List()));
  }
  return static_cast<int>(it - batches_.begin());
}

absl::StatusOr<int64_t> BucketSelector::PadToBucket(int64_t rows) const {
  if (rows < 1) return absl::InvalidArgumentError(absl::StrCat("cannot pad ", rows, " rows"));
  auto it = std::lower_bound(batches_.begin(), batches_.end(), rows);
  if (it == batches_.end()) {
    return absl::OutOfRangeError(
        absl::StrCat(rows, " rows fit no bucket; the buckets are ", List(), ": split the batch"));
  }
  return *it;
}

absl::Status BucketSelector::AddInput(const std::string& name, std::vector<int64_t> elements) {
  if (elements.size() != batches_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("input '", name, "': ", elements.size(),
                                                   " sizes for ", batches_.size(), " buckets"));
  }
  std::vector<int64_t> distinct = elements;
  std::sort(distinct.begin(), distinct.end());
  const size_t count = std::unique(distinct.begin(), distinct.end()) - distinct.begin();
  if (count != 1 && count != batches_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input '", name, "' has ", absl::StrJoin(elements, ", "), " elements in buckets ", List(),
        ": a batched input must have a size of its own in every bucket"));
  }
  inputs_[name] = {std::move(elements), count > 1};
  return absl::OkStatus();
}

absl::StatusOr<int> BucketSelector::BucketOfInput(absl::string_view name, int64_t values) const {
  auto it = inputs_.find(name);
  if (it == inputs_.end() || !it->second.batched) return -1;
  const std::vector<int64_t>& elements = it->second.elements;
  auto match = std::find(elements.begin(), elements.end(), values);
  if (match == elements.end()) {
    std::vector<std::string> sizes;
    for (size_t k = 0; k < batches_.size(); ++k) {
      sizes.push_back(absl::StrCat(elements[k], " (batch ", batches_[k], ")"));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "input '", name, "' got ", values, " values, which fit no bucket: the buckets take ",
        absl::StrJoin(sizes, ", "), "; pad the batch (PadToBucket, PadRows)"));
  }
  const int bucket = static_cast<int>(match - elements.begin());
  if (!chosen_by_.empty() && bucket != next_ && chosen_by_ != name) {
    return absl::InvalidArgumentError(
        absl::StrCat("input '", name, "' has batch ", batches_[bucket], "'s size, but '",
                     chosen_by_, "' was bound for batch ", batches_[next_],
                     " since the last step: a step's inputs are all of one bucket"));
  }
  return bucket;
}

void BucketSelector::Bound(absl::string_view name, int bucket) {
  if (chosen_by_.empty() || next_ != bucket) chosen_by_ = std::string(name);
  next_ = bucket;
}

void BucketSelector::Select(int bucket) {
  next_ = bucket;
  chosen_by_.clear();
}

void BucketSelector::Stepped() {
  last_ = next_;
  chosen_by_.clear();
}

}  // namespace reprise
