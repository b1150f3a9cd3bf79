#include "src/parallel/rendezvous.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/util/status_macros.h"

namespace reprise::parallel {
namespace {

// What each rank tells the others; fixed size so one all-gather carries it.
struct RankCard {
  char host[256];
  int32_t devices;
};

// What rank 0 tells the others: the id, or why there is none.
struct IdCard {
  char ok;
  char id[sizeof(DataParallelId::bytes)];
  char error[512];
};

}  // namespace

absl::StatusOr<MpiRank> Rendezvous(RendezvousTransport& transport,
                                   const RendezvousOptions& options) {
  const int rank = transport.rank(), size = transport.size();
  if (options.host_name.size() >= sizeof(RankCard::host)) {
    return absl::InvalidArgumentError(absl::StrCat("host name '", options.host_name, "' has ",
                                                   options.host_name.size(),
                                                   " bytes; at most 255 fit"));
  }
  RankCard mine = {};
  std::memcpy(mine.host, options.host_name.data(), options.host_name.size());
  mine.devices = options.visible_devices;
  std::vector<RankCard> cards(size);
  RETURN_IF_ERROR(transport.AllGather(&mine, sizeof(mine), cards.data()));

  // Every rank checks every host, so that all fail alike rather than some waiting in NCCL.
  std::map<std::string, std::pair<int, int>> hosts;  // Host -> (ranks, fewest devices seen).
  int local_rank = 0;
  for (int r = 0; r < size; ++r) {
    const std::string host(cards[r].host);
    auto [it, added] = hosts.try_emplace(host, 0, cards[r].devices);
    if (r < rank && host == options.host_name) ++local_rank;
    ++it->second.first;
    it->second.second = std::min(it->second.second, static_cast<int>(cards[r].devices));
  }
  for (const auto& [host, counts] : hosts) {
    if (counts.first > counts.second) {
      return absl::FailedPreconditionError(absl::StrCat(
          "data parallel: host '", host, "' runs ", counts.first, " ranks but has ", counts.second,
          " GPU", counts.second == 1 ? "" : "s", ": start at most one rank per GPU"));
    }
  }

  IdCard card = {};
  if (rank == 0) {
    absl::StatusOr<DataParallelId> id =
        options.new_id ? options.new_id()
                       : absl::InvalidArgumentError("RendezvousOptions::new_id is not set");
    card.ok = id.ok();
    if (id.ok()) {
      std::memcpy(card.id, id->bytes.data(), sizeof(card.id));
    } else {
      const std::string message = id.status().ToString();
      std::memcpy(card.error, message.data(), std::min(message.size(), sizeof(card.error) - 1));
    }
  }
  RETURN_IF_ERROR(transport.BroadcastFromRoot(&card, sizeof(card)));
  if (!card.ok) {
    return absl::FailedPreconditionError(
        absl::StrCat("data parallel: rank 0 could not make the job's id: ", card.error));
  }
  MpiRank out;
  out.data_parallel.rank = rank;
  out.data_parallel.world_size = size;
  out.data_parallel.bucket_bytes = options.bucket_bytes;
  std::memcpy(out.data_parallel.id.bytes.data(), card.id, sizeof(card.id));
  out.device = local_rank;
  return out;
}

}  // namespace reprise::parallel
