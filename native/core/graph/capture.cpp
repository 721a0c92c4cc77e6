// NNGraph's self-capture: an encode with the sizes and settings of the one
// before it records the step onto a replayable command buffer of the graph's
// own, over stand-ins of its sources; later encodes like it encode copies in,
// a run of the recording and copies out, instead of every step's encode.
#include <algorithm>

#include "mpsx/buffer.h"
#include "mpsx/capture.h"
#include "mpsx/command_buffer.h"
#include "mpsx/errors.h"
#include "mpsx/graph.h"
#include "mpsx/kernel.h"
#include "mpsx/pool.h"

namespace mpsx {

namespace {
constexpr size_t kNone = SIZE_MAX;  // no slot, no index

template <class T>
size_t index_of(const std::vector<T>& values, const T& value) {
  auto found = std::find(values.begin(), values.end(), value);
  return found == values.end() ? kNone : static_cast<size_t>(found - values.begin());
}
}  // namespace

struct NNGraph::Capture {
  CaptureKey key;
  // A step of the key would not replay alike (NotCapturable), or a source
  // state has no stand-in: encodes with the key encode the steps.
  bool refused = false;
  std::shared_ptr<CommandBuffer> recording;
  std::vector<std::shared_ptr<Image>> sources;
  std::vector<std::shared_ptr<State>> states;
  // The result (where needed), then the intermediate images, as Encoded has them.
  struct Output {
    std::shared_ptr<Image> image;  // the recording's
    size_t slot = kNone;
    size_t source = kNone;         // the source image it is, if it is one
    size_t same_as = kNone;        // the earlier output it is, if it is one
    std::shared_ptr<DefaultImageAllocator> allocator;  // what makes it; null: the graph's own
    bool synchronized = false;
  };
  std::vector<Output> outputs;
  std::vector<size_t> synchronized_states;  // source states the encode synchronizes
  // What the recording's encode left each buffer it uses: written by it,
  // synchronized for the host on it. A run leaves the same on its command buffer.
  struct BufferUse {
    std::shared_ptr<Buffer> buffer;
    bool written = false, synchronized = false;
  };
  std::vector<BufferUse> buffers;
  bool has_completed_handlers = false;
  // Per encode, kept for their storage: (given, stand-in) image pairs read
  // and written, and the images the encode returns.
  std::vector<State::ImagePair> reads, writes;
  std::vector<std::shared_ptr<Image>> made;
};

bool NNGraph::CaptureKey::operator==(const CaptureKey& other) const {
  return queue == other.queue && generation == other.generation && format == other.format &&
         allocators == other.allocators && sources == other.sources;
}

bool NNGraph::capturable_on(const CommandBuffer& command_buffer,
                            const std::vector<std::shared_ptr<Image>>& source_images,
                            const std::vector<std::shared_ptr<State>>& source_states) const {
  if (!capture_encodes || command_buffer.replayable() || data_parallel_ || !result_states_.empty()) return false;
  // What would make the encode of the steps raise is left to it, for its errors.
  if (&command_buffer.device() != device_.get()) return false;
  for (size_t i = 0; i < source_images.size(); ++i) {
    const Image& image = *source_images[i];
    if (&image.device() != device_.get()) return false;
    if (!image.is_temporary()) continue;
    if (image.read_count() < source_image_reads_[i]) return false;
    try {
      image.check_usable(command_buffer, "NNGraph");
    } catch (const Error&) {
      return false;
    }
  }
  for (const auto& state : source_states)
    if (state->is_temporary() || &state->device() != device_.get()) return false;
  return true;
}

void NNGraph::fill_capture_key(CaptureKey& key, const CommandBuffer& command_buffer,
                               const std::vector<std::shared_ptr<Image>>& source_images) const {
  key.queue = &command_buffer.queue();
  key.generation = capture_generation() + reloads_;
  key.format = format_;
  key.allocators.resize(steps_.size());
  for (size_t i = 0; i < steps_.size(); ++i) key.allocators[i] = step_allocator(i).get();
  key.sources.resize(source_images.size());
  for (size_t i = 0; i < source_images.size(); ++i) key.sources[i] = source_images[i]->descriptor();
}

bool NNGraph::encode_capturing(CommandBuffer& command_buffer, const std::vector<std::shared_ptr<Image>>& source_images,
                               const std::vector<std::shared_ptr<State>>& source_states, Encoded& encoded) {
  fill_capture_key(next_key_, command_buffer, source_images);
  const bool repeated = next_key_ == last_key_;
  std::swap(last_key_, next_key_);
  if (capture_ && capture_->key == last_key_) {
    if (capture_->refused) return false;
    if (encode_captured(command_buffer, source_images, source_states, encoded)) return true;
  }
  return repeated && record_capture(command_buffer, source_images, source_states, encoded);
}

bool NNGraph::record_capture(CommandBuffer& command_buffer, const std::vector<std::shared_ptr<Image>>& source_images,
                             const std::vector<std::shared_ptr<State>>& source_states, Encoded& encoded) {
  auto capture = std::make_shared<Capture>();
  capture->key = last_key_;
  auto refuse = [&] {
    auto refused = std::make_shared<Capture>();
    refused->key = last_key_;
    refused->refused = true;
    capture_ = std::move(refused);
    return false;
  };
  for (const auto& image : source_images) capture->sources.push_back(make_pooled<Image>(device_, image->descriptor()));
  for (const auto& state : source_states) {
    capture->states.push_back(state->make_stand_in());
    if (!capture->states.back()) return refuse();
  }
  capture->recording = command_buffer.queue().command_buffer(/*replayable=*/true);
  Encoded made;
  try {
    CaptureRecording recording;
    made = encode_steps(*capture->recording, capture->sources, capture->states);
  } catch (const NotCapturable&) {
    return refuse();
  } catch (...) {
    return false;  // the encode of the steps raises it again
  }
  if (!describe_outputs(*capture, made)) return refuse();
  for (size_t slot : synchronized_states_) {
    const size_t source = index_of(source_state_slots_, slot);
    if (source != kNone) capture->synchronized_states.push_back(source);
  }
  const Completion& recorded = *capture->recording->completion();
  capture->recording->for_each_use([&](Buffer& buffer) {
    capture->buffers.push_back(
        {buffer.shared_from_this(), buffer.written_by(recorded), buffer.synchronized_on(recorded)});
  });
  capture->has_completed_handlers = capture->recording->has_completed_handlers();
  capture_ = std::move(capture);
  return encode_captured(command_buffer, source_images, source_states, encoded);
}

// The images the recording's encode returned (`made`), as each later encode makes its own: a source, an output
// before it, or an image of the allocator that made it. False for one no allocator makes there.
bool NNGraph::describe_outputs(Capture& capture, const Encoded& made) const {
  auto add = [&](size_t slot, const std::shared_ptr<Image>& image) {
    Capture::Output output;
    output.image = image;
    output.slot = slot;
    output.source = index_of(source_image_slots_, slot);
    for (size_t i = 0; i < capture.outputs.size(); ++i)
      if (capture.outputs[i].slot == slot) output.same_as = i;
    output.synchronized = index_of(synchronized_images_, slot) != kNone;
    if (output.source == kNone) {
      const std::shared_ptr<ImageAllocator>& allocator = step_allocator(index_of(step_result_slots_, slot));
      output.allocator = std::dynamic_pointer_cast<DefaultImageAllocator>(allocator);
      if (allocator && !output.allocator) return false;
    }
    capture.outputs.push_back(std::move(output));
    return image != nullptr;
  };
  if (result_slot_ != kNone && !add(result_slot_, made.result)) return false;
  for (size_t i = 0; i < intermediate_slots_.size(); ++i)
    if (!add(intermediate_slots_[i], made.intermediate_images[i])) return false;
  return true;
}

bool NNGraph::encode_captured(CommandBuffer& command_buffer, const std::vector<std::shared_ptr<Image>>& source_images,
                              const std::vector<std::shared_ptr<State>>& source_states, Encoded& encoded) {
  Capture& c = *capture_;
  c.reads.clear();
  c.writes.clear();
  c.made.clear();
  for (size_t i = 0; i < source_images.size(); ++i) c.reads.emplace_back(source_images[i], c.sources[i]);
  for (size_t i = 0; i < source_states.size(); ++i)
    if (!source_states[i]->pair_with_stand_in(*c.states[i], c.reads, c.writes)) return false;
  for (const Capture::Output& output : c.outputs) {
    const ImageDescriptor& d = output.image->descriptor();
    if (output.same_as != kNone) {
      c.made.push_back(c.made[output.same_as]);
    } else if (output.source != kNone) {
      c.made.push_back(source_images[output.source]);
    } else {
      c.made.push_back(output.allocator ? output.allocator->make(command_buffer, d) : make_pooled<Image>(device_, d));
      c.writes.emplace_back(c.made.back(), output.image);
    }
  }

  for (const auto& pair : c.reads)
    command_buffer.record([from = pair.first, to = pair.second](ExecutionContext& context) {
      context.copy_images(*from, *to, 0);
    });
  command_buffer.record([recording = c.recording](ExecutionContext& context) { context.run_recording(*recording); });
  for (const auto& pair : c.writes)
    command_buffer.record([to = pair.first, from = pair.second](ExecutionContext& context) {
      context.copy_images(*from, *to, 0);
    });

  // The host-access bookkeeping and read counts the encode of the steps leaves.
  for (size_t i = 0; i < source_images.size(); ++i) {
    if (source_image_reads_[i] == 0) source_images[i]->buffer()->will_read(command_buffer);
    for (int64_t read = 0; read < source_image_reads_[i]; ++read) source_images[i]->will_read(command_buffer);
  }
  for (size_t i = source_images.size(); i < c.reads.size(); ++i) c.reads[i].first->will_read(command_buffer);
  for (const auto& pair : c.writes) pair.first->will_write(command_buffer);
  for (const Capture::BufferUse& use : c.buffers) {
    if (use.written)
      use.buffer->will_write(command_buffer);
    else
      use.buffer->will_read(command_buffer);
    if (use.synchronized) use.buffer->synchronize(command_buffer);
  }
  for (size_t i = 0; i < c.outputs.size(); ++i)
    if (c.outputs[i].synchronized && c.outputs[i].same_as == kNone) c.made[i]->synchronize(command_buffer);
  for (size_t i : c.synchronized_states) source_states[i]->synchronize(command_buffer);
  if (c.has_completed_handlers)
    command_buffer.add_completed_handler(
        [recording = c.recording](CommandBuffer& done) { recording->run_completed_handlers_for(done); });

  size_t next = 0;
  if (result_slot_ != kNone) encoded.result = c.made[next++];
  encoded.intermediate_images.assign(c.made.begin() + static_cast<std::ptrdiff_t>(next), c.made.end());
  ++captured_encode_count_;
  return true;
}

}  // namespace mpsx
