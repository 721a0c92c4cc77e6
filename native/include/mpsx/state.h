// MPSState / MPSNNGradientState: what a forward encode leaves for its
// gradient, bound to the source images of the encode that filled it.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "mpsx/image.h"
#include "mpsx/temporary.h"
#include "mpsx/types.h"

namespace mpsx {

class Buffer;
class CommandBuffer;
class Device;
struct Completion;

class State : public std::enable_shared_from_this<State> {
 public:
  explicit State(std::shared_ptr<Device> device);
  virtual ~State();
  State(const State&) = delete;
  State& operator=(const State&) = delete;

  Device& device() const { return *device_; }
  const std::shared_ptr<Device>& device_ptr() const { return device_; }
  // The MPS class name, for messages.
  virtual const char* class_name() const { return "MPSState"; }

  // A state holds what the forward encode that last filled it computed for
  // its source images: gradients must give those images (check_source). A
  // forward encode may fill it for `source` unless check_bindable throws
  // StateError. A state that serves several sub-batches (batch
  // normalization) overrides these; its check_source also selects the
  // sub-batch whose gradient is encoded.
  virtual void check_bindable(const Image& /*source*/, const char* /*kernel*/) const {}
  virtual void bind_source(const Image& source) { source_identity_ = source.identity(); }
  virtual void check_source(const Image& source, const char* kernel);
  bool is_bound() const { return source_identity_ != 0; }

  // MPSState isTemporary and readCount (MPSState.h): a temporary state is
  // valid on the command buffer it was made for, from creation until its
  // read count reaches 0; a non-temporary one on any command buffer of its
  // device, with a read count of 0 that reads leave as it is.
  bool is_temporary() const { return lifetime_.is_temporary(); }
  int64_t read_count() const { return lifetime_.read_count(); }
  void set_read_count(int64_t count) { lifetime_.set_read_count(count, class_name()); }
  // Makes a new state temporary for `command_buffer`, with a read count of 1.
  void make_temporary(const CommandBuffer& command_buffer) { lifetime_.make_temporary(command_buffer); }
  void check_usable(const CommandBuffer& command_buffer, const char* kernel) const {
    lifetime_.check_usable(command_buffer, kernel, class_name());
  }
  // A gradient encode read it: a temporary state's read count drops by 1.
  void was_read() { lifetime_.was_read(); }

  // MPS -synchronizeOnCommandBuffer: for every buffer the state exposes.
  virtual void synchronize(CommandBuffer& command_buffer);
  // Whether `image` shares memory with a buffer of the state (what kernels
  // encoding with it read or write besides their images).
  virtual bool shares_memory(const Image& /*image*/) const { return false; }
  // Appends the gradients of the trainable values the gradient encode that
  // used this state wrote (a convolution's weights and biases, a
  // normalization's gamma and beta): what a data-parallel step all-reduces.
  // None by default.
  virtual void append_trainable_gradients(std::vector<std::shared_ptr<Buffer>>& /*gradients*/) const {}

  // For a graph that records its encode once and runs the recording at later
  // encodes (NNGraph's capture): a state of this kind and sizes with storage
  // of its own, which the recording reads and writes in place of the states
  // later encodes are given; null for a kind that has none (the graph then
  // encodes each step).
  virtual std::shared_ptr<State> make_stand_in() const { return nullptr; }
  // Pairs this state's images with those of `stand_in` (made by
  // make_stand_in of a state of this kind), this one's first: those an
  // encode reads, then those it writes. False, appending nothing, where the
  // sizes differ.
  using ImagePair = std::pair<std::shared_ptr<Image>, std::shared_ptr<Image>>;
  virtual bool pair_with_stand_in(State& /*stand_in*/, std::vector<ImagePair>& /*reads*/,
                                  std::vector<ImagePair>& /*writes*/) {
    return false;
  }

  // MPSState's resources (MPSState.h): buffers a state made with them holds,
  // each of `sizes`, "deferred until it is needed" (resource_at allocating),
  // or the buffers given. The families' states keep their buffers apart.
  void set_resources(std::vector<size_t> sizes);
  void set_resources(std::vector<std::shared_ptr<Buffer>> buffers);
  size_t resource_count() const { return resource_sizes_.size(); }
  // Throws ArgumentError for an index past resource_count().
  size_t buffer_size_at(size_t index) const;
  // The buffer at `index`, made now where `allocate`; null if not made yet
  // and not `allocate`.
  std::shared_ptr<Buffer> resource_at(size_t index, bool allocate);
  // The bytes of the resources.
  size_t resource_size() const;

 private:
  std::shared_ptr<Device> device_;
  std::vector<size_t> resource_sizes_;
  std::vector<std::shared_ptr<Buffer>> resources_;
  uint64_t source_identity_ = 0;
  TemporaryLifetime lifetime_;
};

// Where a forward encode read and wrote, resolved from offset, clipRect,
// feature channel offsets and the two images.
struct Geometry {
  int64_t source_image = 0, destination_image = 0, images = 0;
  int64_t source_channel = 0, destination_channel = 0;
  // Feature channels read from source_channel on (the slice that
  // sourceFeatureChannelMaxCount leaves).
  int64_t source_channels = 0;
  int64_t x = 0, y = 0, width = 0, height = 0;  // destination region written
  // Source position of the window's top-left corner for destination (x, y);
  // outside the image where padding is read.
  int64_t source_x = 0, source_y = 0;
};

// MPSNNGradientState: the forward geometry and image sizes, for the gradient.
class GradientState : public State {
 public:
  using State::State;
  const char* class_name() const override { return "MPSNNGradientState"; }
  // A forward encode overwrites a filled state for other source images of
  // the size it was filled for; other sizes raise StateError.
  void check_bindable(const Image& source, const char* kernel) const override;

  ImageDescriptor source_descriptor;       // the forward source image
  ImageDescriptor destination_descriptor;  // the forward result image
  Geometry geometry;
  // The MPS class of the forward kernel whose encode filled it, and the
  // identity of that encode's result image, for gradient kernels whose
  // secondary image is the forward result.
  const char* forward_class = nullptr;
  uint64_t result_identity = 0;
  bool encoded = false;  // set once the forward pass was encoded with it
};

}  // namespace mpsx
