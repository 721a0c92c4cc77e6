#include "mpsx/distributed.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <sstream>

#include "mpsx/buffer.h"
#include "mpsx/command_buffer.h"
#include "mpsx/device.h"
#include "mpsx/errors.h"
#include "mpsx/registry.h"

namespace mpsx {

namespace {
// The layout check exchanges each rank's layout in its own place of a table
// that the group sums (an all-gather, since the other places are 0), as
// 16-bit pieces, which float32 holds exactly.
constexpr size_t kPieces = 4;
// A rank's place: the magic number, bucket_bytes, then the Layout's fields.
constexpr size_t kFields = 11;
// "mpsxLay1": a place without it holds another collective's values.
constexpr uint64_t kMagic = 0x6d7073784c617931;
// Chosen buckets (bucket_bytes 0): an overlapped all-reduce's are a quarter of the bytes it reduces, so that a
// graph's backward pass launches about four, within these bounds: small ones cost a collective's latency each,
// and DDP's 25 MiB suits the largest models. Others are of the largest size: the fewest collectives.
constexpr size_t kChosenBuckets = 4, kChosenBucketMin = size_t{256} << 10, kChosenBucketMax = size_t{25} << 20;

uint64_t combine(uint64_t hash, uint64_t value) {
  return hash ^ (value + 0x9e3779b97f4a7c15ULL + (hash << 6) + (hash >> 2));
}
}  // namespace

bool Communicator::Layout::operator==(const Layout& o) const {
  return operation == o.operation && buffers == o.buffers && bytes == o.bytes && collectives == o.collectives &&
         hash == o.hash && std::equal(first, first + 4, o.first);
}

// The layouts the group has found equal on every rank, and the exchange that
// checks a new one, run as a command before the layout's first collective.
// Every rank runs the same collectives in the same order, so every rank
// finds the same layouts new: the group exchanges exactly when each rank
// does, and every rank reads the same table.
struct Communicator::LayoutChecks {
  int rank, world_size;
  size_t bucket_bytes;
  std::mutex mutex;
  std::vector<Layout> checked;
  std::atomic<uint64_t> runs{0};

  bool has(const Layout& layout) {
    std::lock_guard<std::mutex> lock(mutex);
    return std::find(checked.begin(), checked.end(), layout) != checked.end();
  }

  void run(ExecutionContext& context, CollectivePrimitive& collective, const Layout& layout) {
    if (has(layout)) return;  // a command buffer encoded before an earlier one checked it ran
    ++runs;
    std::vector<float> table(static_cast<size_t>(world_size) * kFields * kPieces, 0.0f);
    const uint64_t mine[kFields] = {kMagic, bucket_bytes, layout.operation, layout.buffers, layout.bytes,
                                    layout.collectives, layout.hash, layout.first[0], layout.first[1],
                                    layout.first[2], layout.first[3]};
    for (size_t f = 0; f < kFields; ++f)
      for (size_t p = 0; p < kPieces; ++p)
        table[(rank * kFields + f) * kPieces + p] = static_cast<float>((mine[f] >> (16 * p)) & 0xffff);
    collective.all_reduce_on_host(context, table.data(), table.size());
    // Each rank's fields; false where its place is not a layout.
    auto read = [&](int r, uint64_t* fields) {
      for (size_t f = 0; f < kFields; ++f) {
        fields[f] = 0;
        for (size_t p = 0; p < kPieces; ++p) {
          const float piece = table[(r * kFields + f) * kPieces + p];
          if (!(piece >= 0 && piece <= 0xffff && piece == std::floor(piece))) return false;
          fields[f] |= static_cast<uint64_t>(piece) << (16 * p);
        }
      }
      return fields[0] == kMagic;
    };
    // Rank 0's layout, and the first rank's that differs (bucket_bytes may differ where the buckets do not).
    uint64_t first[kFields], other[kFields];
    bool layouts = read(0, first);
    int differing = -1;
    for (int r = 1; r < world_size && layouts && differing < 0; ++r) {
      layouts = read(r, other);
      if (layouts && !std::equal(first + 2, first + kFields, other + 2)) differing = r;
    }
    if (layouts && differing < 0) {
      std::lock_guard<std::mutex> lock(mutex);
      checked.push_back(layout);
      return;
    }
    std::ostringstream message;
    message << "all_reduce on rank " << rank << " of " << world_size
            << ": the ranks reduce different buffers or buckets, and their collectives pair up in order: ";
    if (!layouts) {
      message << "another rank ran a collective of its own instead of this check (it reduced a layout the group "
                 "had checked while this rank reduced a new one)";
    } else {
      message << "rank 0 reduces " << describe(first) << "; rank " << differing << " reduces " << describe(other);
      if (std::equal(first + 2, first + 6, other + 2) && std::equal(first + 7, first + kFields, other + 7))
        message << " (buffers of other sizes, or in another order)";
    }
    message << ". Every rank must reduce buffers of the same sizes, in the same order, with the same bucket_bytes "
               "and op";
    fail<DistributedError>(message.str());
  }

  static std::string describe(const uint64_t* fields) {
    std::ostringstream out;
    const uint64_t collectives = fields[5];
    out << fields[3] << " buffers (" << fields[4] << " bytes, op '" << (fields[2] ? "mean" : "sum") << "') in "
        << collectives << " collective call" << (collectives == 1 ? "" : "s");
    for (uint64_t i = 0; i < std::min<uint64_t>(collectives, 4); ++i) out << (i ? ", " : " of ") << fields[7 + i];
    if (collectives) out << (collectives > 4 ? ", ... bytes" : " bytes");
    out << " (bucket_bytes ";
    if (fields[1])
      out << fields[1] << ")";
    else
      out << "chosen)";
    return out.str();
  }
};

Communicator::Communicator(std::shared_ptr<Device> device, const CollectiveDescriptor& descriptor,
                           size_t bucket_bytes)
    : device_(std::move(device)), rank_(descriptor.rank), world_size_(descriptor.world_size),
      bucket_bytes_(bucket_bytes) {
  if (!device_) fail<TypeMismatchError>("Communicator: expected a Device, given None");
  if (world_size_ < 1) fail<ArgumentError>("Communicator: expected a world size of at least 1, given ", world_size_);
  if (rank_ < 0 || rank_ >= world_size_)
    fail<ArgumentError>("Communicator: expected a rank in [0, ", world_size_, "), given ", rank_);
  if ((bucket_bytes_ != 0 && bucket_bytes_ < sizeof(float)) || bucket_bytes_ > Device::kMaxAllocation)
    fail<ArgumentError>("Communicator: expected a bucket size of 4 bytes to 2^48, or 0 to choose it, given ",
                        bucket_bytes_);
  if (!(descriptor.timeout_seconds > 0))
    fail<ArgumentError>("Communicator: expected a timeout above 0 seconds, given ", descriptor.timeout_seconds);
  collective_ = make_primitive<CollectivePrimitive>(device_->backend(), descriptor);
  layout_checks_ = std::make_shared<LayoutChecks>();
  layout_checks_->rank = rank_;
  layout_checks_->world_size = world_size_;
  layout_checks_->bucket_bytes = bucket_bytes_;
}

Communicator::~Communicator() = default;

uint64_t Communicator::layout_checks() const { return layout_checks_->runs.load(); }

size_t Communicator::bucket_for(size_t bytes) const {
  if (bucket_bytes_) return bucket_bytes_;
  if (!bytes) return kChosenBucketMax;
  return std::clamp(bytes / kChosenBuckets / sizeof(float) * sizeof(float), kChosenBucketMin, kChosenBucketMax);
}

void Communicator::begin_layout(CommandBuffer& command_buffer, ReduceOperation operation) {
  layout_ = Layout{};
  layout_.operation = static_cast<uint64_t>(operation);
  layout_mark_ = command_buffer.mark();
}

// A group of one has nothing to compare; a layout checked already costs nothing more.
void Communicator::encode_layout_check(CommandBuffer& command_buffer) {
  if (world_size_ == 1 || layout_checks_->has(layout_)) return;
  command_buffer.record_at(layout_mark_, [checks = layout_checks_, collective = collective_,
                                          layout = layout_](ExecutionContext& context) {
    checks->run(context, *collective, layout);
  });
}

void Communicator::encode_all_reduce(CommandBuffer& command_buffer, const std::vector<std::shared_ptr<Buffer>>& buffers,
                                     ReduceOperation operation) {
  check(command_buffer, buffers);
  std::lock_guard<std::mutex> lock(mutex_);
  if (overlapping_)
    fail<StateError>("all_reduce: overlapped all-reduces of this group wait for encode_join on their command buffer");
  next_bucket_ = 0;
  bucket_ = bucket_for(0);  // reduced where encoded: the fewest collectives
  begin_layout(command_buffer, operation);
  encode(command_buffer, buffers, operation);
  encode_layout_check(command_buffer);
  const std::shared_ptr<CollectivePrimitive> collective = collective_;
  // A collective that failed or timed out after launching fails the command buffer once it has run.
  command_buffer.add_host_step([collective] { collective->check(); });
}

void Communicator::encode_all_reduce_overlapped(CommandBuffer& command_buffer,
                                                const std::vector<std::shared_ptr<Buffer>>& buffers,
                                                ReduceOperation operation, size_t total_bytes) {
  check(command_buffer, buffers);
  std::lock_guard<std::mutex> lock(mutex_);
  if (overlapping_ && (overlapping_ != &command_buffer || overlapped_operation_ != operation))
    fail<StateError>("all_reduce: overlapped all-reduces of this group wait for encode_join on their command buffer");
  if (!overlapping_) {
    overlapping_ = &command_buffer;
    overlapped_operation_ = operation;
    next_bucket_ = 0;
    bucket_ = bucket_for(total_bytes);
    begin_layout(command_buffer, operation);
  }
  for (const auto& b : buffers) {
    filling_.push_back(b);
    filling_bytes_ += b->length();
  }
  if (filling_bytes_ < bucket_) return;
  encode_filling(command_buffer);
}

bool Communicator::overlapped_filling() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return !filling_.empty();
}

void Communicator::encode_overlapped(CommandBuffer& command_buffer, FunctionRef encode_commands) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (overlapping_ != &command_buffer)
      fail<StateError>("all_reduce: commands overlapped with no overlapped all-reduce on their command buffer");
  }
  command_buffer.record_overlapped(encode_commands);
}

// The filling bucket's buffers as overlapped work, which empties it (the caller holds mutex_).
void Communicator::encode_filling(CommandBuffer& command_buffer) {
  auto encode_buckets = [&] { encode(command_buffer, filling_, overlapped_operation_); };
  command_buffer.record_overlapped(encode_buckets);
  filling_.clear();
  filling_bytes_ = 0;
}

void Communicator::encode_join(CommandBuffer& command_buffer) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!overlapping_) return;
  if (overlapping_ != &command_buffer)
    fail<StateError>("all_reduce: join on another command buffer than the overlapped all-reduces'");
  if (!filling_.empty()) encode_filling(command_buffer);
  encode_layout_check(command_buffer);
  command_buffer.record_join_overlapped();
  const std::shared_ptr<CollectivePrimitive> collective = collective_;
  command_buffer.add_host_step([collective] { collective->check(); });
  overlapping_ = nullptr;
}

void Communicator::forget_overlapped() {
  std::lock_guard<std::mutex> lock(mutex_);
  filling_.clear();
  filling_bytes_ = 0;
  overlapping_ = nullptr;
}

void Communicator::check(CommandBuffer& command_buffer, const std::vector<std::shared_ptr<Buffer>>& buffers) const {
  command_buffer.check_encodable();
  if (&command_buffer.device() != device_.get())
    fail<DeviceMismatchError>("all_reduce: the command buffer is of ", command_buffer.device().name(),
                              ", the group's device is ", device_->name());
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (!buffers[i]) fail<TypeMismatchError>("all_reduce: expected buffer ", i, ", given None");
    if (&buffers[i]->device() != device_.get())
      fail<DeviceMismatchError>("all_reduce: buffer ", i, " is of ", buffers[i]->device().name(),
                                ", the group's device is ", device_->name());
    if (buffers[i]->length() % sizeof(float))
      fail<ArgumentError>("all_reduce: expected buffers of whole float32 values, given buffer ", i, " of ",
                          buffers[i]->length(), " bytes");
  }
}

// Records the buckets of `buffers` (checked): packs, collectives and unpacks.
void Communicator::encode(CommandBuffer& command_buffer, const std::vector<std::shared_ptr<Buffer>>& buffers,
                          ReduceOperation operation) {
  const std::shared_ptr<CollectivePrimitive> collective = collective_;
  auto reduce = [&](std::shared_ptr<Buffer> buffer, size_t bytes) {
    buffer->will_write(command_buffer);
    command_buffer.record([collective, buffer, bytes, operation](ExecutionContext& context) {
      collective->all_reduce(context, static_cast<float*>(buffer->data()), bytes / sizeof(float), operation);
    });
    ++collective_calls_;
    if (layout_.collectives < 4) layout_.first[layout_.collectives] = bytes;
    ++layout_.collectives;
    layout_.hash = combine(layout_.hash, bytes | uint64_t{1} << 63);
  };
  // Each buffer, then the collective that reduces it: the layout the check compares.
  auto visit = [&](const Buffer& buffer) {
    ++layout_.buffers;
    layout_.bytes += buffer.length();
    layout_.hash = combine(layout_.hash, buffer.length());
  };
  size_t next = 0;
  while (next < buffers.size()) {
    if (buffers[next]->length() == 0) {
      visit(*buffers[next++]);
      continue;
    }
    // The buffers that fit one bucket together, in order.
    size_t end = next, bytes = 0;
    while (end < buffers.size() && bytes + buffers[end]->length() <= bucket_) bytes += buffers[end++]->length();
    if (end <= next + 1) {  // one buffer, or one larger than a bucket: where it is
      visit(*buffers[next]);
      reduce(buffers[next], buffers[next]->length());
      next = std::max(end, next + 1);
      continue;
    }
    if (buckets_.size() <= next_bucket_) buckets_.resize(next_bucket_ + 1);
    std::shared_ptr<Buffer>& packed = buckets_[next_bucket_++];
    if (!packed || packed->length() < bytes) packed = std::make_shared<Buffer>(device_, bytes);
    size_t offset = 0;
    for (size_t i = next; i < end; ++i) {
      const std::shared_ptr<Buffer>& b = buffers[i];
      visit(*b);
      command_buffer.record([packed, b, offset](ExecutionContext& context) {
        context.copy(static_cast<char*>(packed->data()) + offset, b->data(), b->length());
      });
      offset += b->length();
    }
    reduce(packed, bytes);
    offset = 0;
    for (size_t i = next; i < end; ++i) {
      const std::shared_ptr<Buffer>& b = buffers[i];
      b->will_write(command_buffer);
      command_buffer.record([packed, b, offset](ExecutionContext& context) {
        context.copy(b->data(), static_cast<char*>(packed->data()) + offset, b->length());
      });
      offset += b->length();
    }
    next = end;
  }
}

std::string new_group_id(Device& device, const std::string& library) {
  return make_primitive<GroupIdPrimitive>(device.backend(), library)->make();
}

}  // namespace mpsx
