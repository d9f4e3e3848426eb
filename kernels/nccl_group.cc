// NCCL as the Collective of a data-parallel job's GPU ranks (backend/collective.h): ranks are
// threads of one process, one communicator per device (ncclCommInitAll), rank i on
// devices[i]. A call on rank i makes its device current, waits for the device's pending work
// (the backend's kernels that wrote the buffer), runs the NCCL operation on the rank's own
// stream and waits for it, so the buffer is ready for the backend's next kernel. NCCL's ring
// and tree algorithms reduce each element once and broadcast the result: every rank gets the
// same bits (not in rank order, as the thread group sums).
//
// Before each operation the ranks meet at a host barrier that compares their sizes: a
// disagreement fails the call on every rank and aborts the group (NCCL itself would hang).
// Abort(why) marks the group and aborts every communicator (ncclCommAbort), which releases
// ranks blocked in NCCL; later calls return `why`.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/collective.h"
#include "cuda_backend.h"

namespace shoal::cuda {
namespace {

Status NcclError(ncclResult_t r, const char* what) {
  return Status::Internal(std::string("NCCL ") + what + ": " + ncclGetErrorString(r));
}

struct NcclGroup {
  std::vector<ncclComm_t> comms;
  std::vector<int> devices;
  std::mutex mu;
  std::condition_variable cv;
  Status aborted;
  int arrived = 0;
  uint64_t generation = 0;
  std::vector<size_t> sizes;

  ~NcclGroup() {
    for (ncclComm_t c : comms)
      if (c) ncclCommDestroy(c);
  }

  // Every rank's size of this call, once all have arrived; the abort status otherwise.
  Status Meet(int rank, size_t size) {
    std::unique_lock<std::mutex> lock(mu);
    if (!aborted.ok()) return aborted;
    sizes[static_cast<size_t>(rank)] = size;
    const uint64_t gen = generation;
    if (++arrived == static_cast<int>(comms.size())) {
      arrived = 0;
      ++generation;
      for (size_t s : sizes)
        if (s != sizes[0]) {
          aborted = Status::InvalidArgument("the ranks called a collective with different sizes");
          for (ncclComm_t c : comms) ncclCommAbort(c);
          comms.assign(comms.size(), nullptr);
        }
      cv.notify_all();
    } else {
      cv.wait(lock, [&] { return generation != gen || !aborted.ok(); });
    }
    return aborted;
  }

  void Abort(const Status& why) {
    std::lock_guard<std::mutex> lock(mu);
    if (!aborted.ok()) return;
    aborted = why.ok() ? Status::Cancelled("the group was aborted") : why;
    for (ncclComm_t c : comms)
      if (c) ncclCommAbort(c);
    comms.assign(comms.size(), nullptr);
    cv.notify_all();
  }
};

class NcclRank final : public Collective {
 public:
  NcclRank(std::shared_ptr<NcclGroup> group, int rank) : group_(std::move(group)), rank_(rank) {}
  ~NcclRank() override {
    if (stream_) cudaStreamDestroy(stream_);
  }
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(group_->devices.size()); }

  Status AllReduceSum(std::span<float> data) override {
    return Run(data.size(), [&](ncclComm_t comm) {
      return ncclAllReduce(data.data(), data.data(), data.size(), ncclFloat, ncclSum, comm, stream_);
    });
  }
  Status Broadcast(std::span<float> data, int root) override {
    if (root < 0 || root >= size()) return Status::InvalidArgument("broadcast root " + std::to_string(root));
    return Run(data.size(), [&](ncclComm_t comm) {
      return ncclBroadcast(data.data(), data.data(), data.size(), ncclFloat, root, comm, stream_);
    });
  }
  void Abort(const Status& why) override { group_->Abort(why); }

 private:
  template <typename Op>
  Status Run(size_t n, Op op) {
    SHOAL_RETURN_IF_ERROR(group_->Meet(rank_, n));
    if (cudaSetDevice(group_->devices[static_cast<size_t>(rank_)]) != cudaSuccess)
      return Status::Internal("cudaSetDevice failed");
    if (!stream_ && cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking) != cudaSuccess)
      return Status::Internal("cudaStreamCreate failed");
    if (cudaDeviceSynchronize() != cudaSuccess) return Status::Internal("cudaDeviceSynchronize failed before NCCL");
    ncclComm_t comm = nullptr;
    {
      std::lock_guard<std::mutex> lock(group_->mu);
      if (!group_->aborted.ok()) return group_->aborted;
      comm = group_->comms[static_cast<size_t>(rank_)];
    }
    if (n == 0) return Status::Ok();
    if (ncclResult_t r = op(comm); r != ncclSuccess) {
      Status st = NcclError(r, "collective");
      group_->Abort(st);
      return st;
    }
    if (cudaStreamSynchronize(stream_) != cudaSuccess) {
      Status st = Status::Internal("the NCCL collective failed on its stream");
      group_->Abort(st);
      return st;
    }
    return Status::Ok();
  }

  std::shared_ptr<NcclGroup> group_;
  int rank_;
  cudaStream_t stream_ = nullptr;
};

}  // namespace

StatusOr<std::vector<std::unique_ptr<Collective>>> MakeNcclGroup(const std::vector<int>& devices) {
  if (devices.empty()) return Status::InvalidArgument("an NCCL group needs at least one device");
  auto group = std::make_shared<NcclGroup>();
  group->devices = devices;
  group->comms.assign(devices.size(), nullptr);
  group->sizes.assign(devices.size(), 0);
  if (ncclResult_t r = ncclCommInitAll(group->comms.data(), static_cast<int>(devices.size()), devices.data());
      r != ncclSuccess) {
    group->comms.assign(devices.size(), nullptr);
    return NcclError(r, "ncclCommInitAll");
  }
  std::vector<std::unique_ptr<Collective>> out;
  for (size_t i = 0; i < devices.size(); ++i) out.push_back(std::make_unique<NcclRank>(group, static_cast<int>(i)));
  return out;
}

}  // namespace shoal::cuda
