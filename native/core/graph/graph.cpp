#include "mpsx/graph.h"

#include "compiler.h"

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <unordered_set>

#include "mpsx/backend.h"
#include "mpsx/buffer.h"
#include "mpsx/command_buffer.h"
#include "mpsx/device.h"
#include "mpsx/distributed.h"
#include "mpsx/errors.h"
#include "mpsx/kernel.h"
#include "mpsx/pool.h"

namespace mpsx {

constexpr size_t kNoSlot = SIZE_MAX;

const char* StateNode::class_name() const {
  switch (kind_) {
    case StateNodeKind::Gradient: return "MPSNNGradientStateNode";
    case StateNodeKind::ConvolutionGradient: return "MPSCNNConvolutionGradientStateNode";
    case StateNodeKind::BinaryGradient: return "MPSNNBinaryGradientStateNode";
    case StateNodeKind::ConvolutionTransposeGradient: return "MPSCNNConvolutionTransposeGradientStateNode";
    case StateNodeKind::Labels: return "MPSNNLabelsNode";
  }
  return "MPSNNStateNode";
}

// ---------------------------------------------------------------- filter nodes

FilterNode::FilterNode(std::vector<std::shared_ptr<ImageNode>> sources,
                       std::vector<std::shared_ptr<StateNode>> source_states, uint32_t default_padding)
    : padding_method(default_padding), sources_(std::move(sources)), source_states_(std::move(source_states)) {
  result_image_.producer_ = this;
  for (const auto& s : sources_)
    if (!s) fail<TypeMismatchError>("a filter node: expected an NNImageNode source, given None");
  for (const auto& s : source_states_)
    if (!s) fail<TypeMismatchError>("a filter node: expected an NNStateNode, given None");
}

FilterNode::~FilterNode() {
  // Each owner this destructor drops may be the last of another filter, whose
  // destructor, run meanwhile on this thread, adds its owners to this list
  // instead of dropping them: the outermost destructor drops them one by one.
  // constructor_arguments and the handles go too: a Python object may hold nodes.
  thread_local std::vector<std::shared_ptr<void>>* releasing = nullptr;
  std::vector<std::shared_ptr<void>> mine;
  std::vector<std::shared_ptr<void>>& owners = releasing ? *releasing : mine;
  auto drop = [&owners](auto&& owner) {
    if (owner) owners.push_back(std::move(owner));
  };
  for (auto& s : sources_) drop(s);
  for (auto& s : source_states_) drop(s);
  if (gradient_origin_) {
    drop(gradient_origin_->forward);
    for (auto& g : gradient_origin_->gradient_images) drop(g);
  }
  drop(constructor_arguments);
  drop(result_image_.handle);
  for (StateNode& state : result_states_) drop(state.handle);
  if (releasing) return;
  releasing = &mine;
  while (!mine.empty()) {
    std::shared_ptr<void> owner = std::move(mine.back());
    mine.pop_back();
    owner.reset();
  }
  releasing = nullptr;
}

std::shared_ptr<FilterNode> ImageNode::producer() const {
  return producer_ ? producer_->shared_from_this() : nullptr;
}

std::shared_ptr<FilterNode> StateNode::producer() const {
  return producer_ ? producer_->shared_from_this() : nullptr;
}

std::shared_ptr<ImageNode> FilterNode::result_image() {
  return std::shared_ptr<ImageNode>(shared_from_this(), &result_image_);
}

std::vector<std::shared_ptr<StateNode>> FilterNode::result_states() {
  if (!result_states_made_) {
    for (StateNodeKind kind : result_state_kinds()) result_states_.emplace_back(kind).producer_ = this;
    result_states_made_ = true;
  }
  std::vector<std::shared_ptr<StateNode>> states;
  for (StateNode& state : result_states_) states.emplace_back(shared_from_this(), &state);
  return states;
}

std::vector<std::shared_ptr<FilterNode>> FilterNode::make_gradient_filters(
    const std::vector<std::shared_ptr<ImageNode>>&) {
  fail<TypeMismatchError>(class_name(), " has no gradient filter");
}

std::vector<std::shared_ptr<FilterNode>> FilterNode::gradient_filters(
    const std::vector<std::shared_ptr<ImageNode>>& gradient_images) {
  if (is_gradient())
    fail<TypeMismatchError>(class_name(), ": a gradient filter makes no gradient filters (no gradients of gradients)");
  if (gradient_images.empty())
    fail<ArgumentError>(class_name(), ": expected the gradient image of the result, given none");
  for (const auto& g : gradient_images)
    if (!g) fail<TypeMismatchError>(class_name(), ": expected an NNImageNode gradient, given None");
  auto made = make_gradient_filters(gradient_images);
  // MPSNNPadding's inverse: "a padding policy suitable for a training
  // gradient pass"; a policy without one leaves the gradient's own.
  std::shared_ptr<const PaddingPolicy> inverse = padding_policy ? padding_policy->inverse() : nullptr;
  for (size_t i = 0; i < made.size(); ++i) {
    if (inverse) {
      made[i]->padding_method = inverse->padding_method();
      made[i]->padding_policy = inverse;
    }
    made[i]->training_style = training_style;
    made[i]->gradient_origin_ = GradientOrigin{shared_from_this(), gradient_images, i};
  }
  return made;
}

void fail_forward_state(const char* gradient, const char* forward, const StateNode* state) {
  if (!state) fail<TypeMismatchError>(gradient, ": expected the result state of an ", forward, ", given None");
  std::shared_ptr<FilterNode> producer = state->producer();
  if (producer)
    fail<TypeMismatchError>(gradient, ": expected the result state of an ", forward, ", given the result state of an ",
                            producer->class_name());
  fail<TypeMismatchError>(gradient, ": expected the result state of an ", forward, ", given an ", state->class_name());
}

void check_forward_parameter(const char* gradient, const char* name, double mine, double forward) {
  if (mine != forward)
    fail<ArgumentError>(gradient, ": ", name, " is ", mine, " but its forward node's is ", forward,
                        " (a gradient node copies its forward node's parameters when it is made; set the same "
                        "value on both, or make it again after changing the forward node)");
}

void fail_forward_not_compiled(const char* gradient) {
  fail<ArgumentError>(gradient, ": its forward filter is not in the graph; a gradient filter updates the filter "
                                "its state comes from");
}

// ---------------------------------------------------------------- graph order

std::vector<std::shared_ptr<FilterNode>> upstream(const std::shared_ptr<FilterNode>& last, bool through_states) {
  std::vector<std::shared_ptr<FilterNode>> order;
  std::unordered_set<const FilterNode*> seen, open;
  // Iterative depth-first search, so deep graphs do not exhaust the stack.
  struct Frame {
    std::shared_ptr<FilterNode> filter;
    size_t next = 0;
  };
  std::vector<Frame> stack{{last, 0}};
  seen.insert(last.get());
  open.insert(last.get());
  while (!stack.empty()) {
    Frame& frame = stack.back();
    const FilterNode& f = *frame.filter;
    const size_t images = f.sources().size();
    const size_t inputs = images + (through_states ? f.source_states().size() : 0);
    if (frame.next < inputs) {
      const size_t i = frame.next++;
      std::shared_ptr<FilterNode> producer =
          i < images ? f.sources()[i]->producer() : f.source_states()[i - images]->producer();
      if (!producer) continue;
      if (open.count(producer.get()))
        fail<ArgumentError>(f.class_name(), ": the graph has a cycle through ", producer->class_name());
      if (!seen.insert(producer.get()).second) continue;
      open.insert(producer.get());
      stack.push_back({std::move(producer), 0});
      continue;
    }
    open.erase(frame.filter.get());
    order.push_back(std::move(frame.filter));
    stack.pop_back();
  }
  return order;
}

// ---------------------------------------------------------------- NNGraph

namespace {

class UnaryStep final : public GraphStep {
 public:
  UnaryStep(std::shared_ptr<UnaryKernel> kernel, const StepSlots& slots, std::function<void()> reload)
      : kernel_(std::move(kernel)),
        reload_(std::move(reload)),
        source_(slots.sources.at(0)),
        result_(slots.result),
        state_(slots.result_states.empty() ? kNoSlot : slots.result_states[0]) {}
  void encode(CommandBuffer& command_buffer, GraphValues& values) override {
    UnaryKernel::Encoded r = kernel_->encode(command_buffer, values.images[source_], nullptr, nullptr, state_ != kNoSlot);
    values.images[result_] = std::move(r.image);
    if (state_ != kNoSlot) values.states[state_] = std::move(r.state);
  }
  void reload_from_data_source() override {
    if (reload_) reload_();
  }

 private:
  std::shared_ptr<UnaryKernel> kernel_;
  std::function<void()> reload_;
  size_t source_, result_, state_;
};

class GradientStep final : public GraphStep {
 public:
  GradientStep(std::shared_ptr<GradientKernel> kernel, const StepSlots& slots)
      : kernel_(std::move(kernel)),
        slots_(slots) {}
  void encode(CommandBuffer& command_buffer, GraphValues& values) override {
    values.images[slots_.result] =
        kernel_->encode(command_buffer, values.images[slots_.source_gradient], values.images[slots_.source],
                        values.states[slots_.state], nullptr);
  }

 private:
  std::shared_ptr<GradientKernel> kernel_;
  const GradientSlots slots_;
};

}  // namespace

std::unique_ptr<GraphStep> unary_step(std::shared_ptr<UnaryKernel> kernel, const StepSlots& slots,
                                      std::function<void()> reload) {
  return std::make_unique<UnaryStep>(std::move(kernel), slots, std::move(reload));
}

std::unique_ptr<GraphStep> gradient_step(std::shared_ptr<GradientKernel> kernel, const StepSlots& slots) {
  return std::make_unique<GradientStep>(std::move(kernel), slots);
}

// The images of a graph's encode: each step's result in the step's format,
// and the storage of images no later step reads handed to the next steps
// that ask for that size, within the encode (the command buffer runs its
// commands in order, so a later command may write what an earlier one has
// finished reading).
class GraphImageAllocator final : public ImageAllocator {
 public:
  DataType format = DataType::Float16;
  // The allocator of the step's image node or of the graph's results, if
  // one is set: its images are never handed to later steps.
  std::shared_ptr<ImageAllocator> node_allocator;

  std::shared_ptr<Image> image(CommandBuffer& command_buffer, const ImageDescriptor& descriptor,
                               const Kernel& kernel) override {
    ImageDescriptor d = descriptor;
    d.channel_format = format;
    if (node_allocator) {
      std::shared_ptr<Image> image = node_allocator->image(command_buffer, d, kernel);
      if (image) foreign_.push_back(image.get());
      return image;
    }
    for (size_t i = 0; i < free_.size(); ++i)
      if (free_[i]->descriptor() == d) {
        std::shared_ptr<Image> image = std::move(free_[i]);
        free_[i] = std::move(free_.back());
        free_.pop_back();
        return image;
      }
    return make_pooled<Image>(kernel.device_ptr(), d);
  }
  void release(const std::shared_ptr<Image>& image) {
    if (image && std::find(foreign_.begin(), foreign_.end(), image.get()) == foreign_.end()) free_.push_back(image);
  }
  void clear() {
    free_.clear();
    foreign_.clear();
  }

 private:
  std::vector<std::shared_ptr<Image>> free_;
  std::vector<const Image*> foreign_;
};

NNGraph::NNGraph(std::shared_ptr<Device> device, std::vector<std::shared_ptr<ImageNode>> results,
                 std::vector<bool> results_are_needed)
    : device_(std::move(device)), results_(std::move(results)), results_needed_(std::move(results_are_needed)) {
  check_results();
  std::unordered_set<const FilterNode*> required;
  const std::vector<std::shared_ptr<FilterNode>> kept = required_filters(required);
  const Fusions fusions = find_fusions(kept, needed_results());
  for (const auto& f : kept)
    if (!fusions.absorbed.count(f.get())) filters_.push_back(f);
  fused_count_ = fusions.absorbed.size();
  SlotNumbering numbering{required, source_images_, source_image_slots_, source_states_, source_state_slots_};
  std::vector<StepSlots> slots = assign_source_slots(numbering, fusions);
  assign_result_slots(slots, numbering, fusions);
  plan_memory(slots, numbering.images.size());
  count_source_reads(slots);
  compile_steps(slots);
  values_.images.resize(numbering.images.size());
  values_.states.resize(numbering.states.size());
}

void NNGraph::check_results() const {
  if (!device_) fail<TypeMismatchError>("NNGraph: expected a Device, given None");
  if (results_.empty()) fail<ArgumentError>("NNGraph: expected at least one result image, given none");
  if (results_needed_.size() != results_.size())
    fail<ArgumentError>("NNGraph: expected one results_are_needed flag per result image (", results_.size(),
                        "), given ", results_needed_.size());
  for (const auto& r : results_) {
    if (!r) fail<TypeMismatchError>("NNGraph: expected NNImageNode results, given None");
    if (!r->producer()) fail<ArgumentError>("NNGraph: a result image is a source image: no filter writes it");
  }
}

std::unordered_set<const ImageNode*> NNGraph::needed_results() const {
  std::unordered_set<const ImageNode*> needed;
  for (size_t i = 0; i < results_.size(); ++i)
    if (results_needed_[i]) needed.insert(results_[i].get());
  return needed;
}

// Every filter the results reach, producers first; of them, the required
// ones: those writing a needed result, those updating weights and the
// trainable gradient filters filling an exported state with the weights'
// gradients (training style NONE), with every filter they read from.
std::vector<std::shared_ptr<FilterNode>> NNGraph::required_filters(
    std::unordered_set<const FilterNode*>& required) const {
  std::vector<std::shared_ptr<FilterNode>> all;
  std::unordered_set<const FilterNode*> listed;
  for (const auto& r : results_)
    for (auto& f : upstream(r->producer(), true))
      if (listed.insert(f.get()).second) all.push_back(std::move(f));
  std::vector<const FilterNode*> pending;
  for (size_t i = 0; i < results_.size(); ++i)
    if (results_needed_[i]) pending.push_back(results_[i]->producer().get());
  auto fills_exported_state = [](const FilterNode& f) {
    if (!f.is_trainable()) return false;
    for (const auto& s : f.source_states())
      if (s->export_from_graph) return true;
    return false;
  };
  for (const auto& f : all)
    if (f->is_gradient() && (f->updates_weights() || fills_exported_state(*f))) pending.push_back(f.get());
  while (!pending.empty()) {
    const FilterNode* f = pending.back();
    pending.pop_back();
    if (!required.insert(f).second) continue;
    for (const auto& s : f->sources())
      if (s->producer()) pending.push_back(s->producer().get());
    for (const auto& s : f->source_states())
      if (s->producer()) pending.push_back(s->producer().get());
  }
  std::vector<std::shared_ptr<FilterNode>> kept;
  for (const auto& f : all)
    if (required.count(f.get())) kept.push_back(f);
  if (kept.empty())
    fail<ArgumentError>("NNGraph: nothing to encode: no result is needed, and no gradient filter updates weights or "
                        "fills an exported state");
  return kept;
}

// The slots each step reads: its source images (a fused neuron's result
// read as the filter's) and states.
std::vector<StepSlots> NNGraph::assign_source_slots(SlotNumbering& numbering, const Fusions& fusions) {
  std::vector<StepSlots> slots(filters_.size());
  for (size_t i = 0; i < filters_.size(); ++i) {
    StepSlots& s = slots[i];
    s.device = device_;
    for (const auto& source : filters_[i]->sources()) s.sources.push_back(numbering.image(fusions.resolve(source)));
    for (const auto& state : filters_[i]->source_states()) s.source_states.push_back(numbering.state(state));
  }
  return slots;
}

// The slots each step writes, whether anything reads them, and what the
// caller gets: exported images and states, the results, the images and
// states to synchronize.
void NNGraph::assign_result_slots(std::vector<StepSlots>& slots, SlotNumbering& numbering, const Fusions& fusions) {
  std::unordered_set<const StateNode*> read_states;
  std::unordered_set<const ImageNode*> read_images = needed_results();
  for (const auto& f : filters_) {
    for (const auto& s : f->source_states()) read_states.insert(s.get());
    for (const auto& source : f->sources()) read_images.insert(fusions.resolve(source).get());
  }
  for (size_t i = 0; i < filters_.size(); ++i) {
    const auto& f = filters_[i];
    StepSlots& s = slots[i];
    const std::shared_ptr<ImageNode> result = fusions.resolve(f->result_image());
    s.result = numbering.image(result);
    step_result_slots_.push_back(s.result);
    step_formats_.push_back(result->format);
    step_results_.push_back(result.get());
    s.result_needed = read_images.count(result.get()) || result->export_from_graph || result->synchronize_resource;
    for (const auto& state : f->result_states()) {
      const bool wanted = read_states.count(state.get()) || state->export_from_graph;
      s.result_states.push_back(wanted ? numbering.state(state) : kNoSlot);
      if (state->export_from_graph) {
        result_states_.push_back(state);
        result_state_slots_.push_back(numbering.states.at(state.get()));
      }
      if (state->synchronize_resource && numbering.states.count(state.get()))
        synchronized_states_.push_back(numbering.states.at(state.get()));
    }
    if (result->synchronize_resource) synchronized_images_.push_back(s.result);
    if (result->export_from_graph && result != results_[0]) {
      intermediate_images_.push_back(result);
      intermediate_slots_.push_back(s.result);
    }
    auto fused = fusions.neuron.find(f.get());
    if (fused != fusions.neuron.end()) s.fused_neuron = fused->second;
  }
  for (size_t i = 1; i < results_.size(); ++i)
    if (results_needed_[i] && !results_[i]->export_from_graph) {
      intermediate_images_.push_back(results_[i]);
      intermediate_slots_.push_back(numbering.images.at(results_[i].get()));
    }
  result_slot_ = results_needed_[0] ? numbering.images.at(results_[0].get()) : kNoSlot;
}

// The memory plan: an image the caller never sees is released after the
// last step that reads it (or after the step writing it, if none does),
// unless overlapped work reads it (kept to the end of the encode, which
// joins that work); an in-place filter takes its source's storage when it is
// its last reader.
void NNGraph::plan_memory(const std::vector<StepSlots>& slots, size_t image_count) {
  std::vector<bool> kept_for_caller(image_count, false);
  for (size_t slot : source_image_slots_) kept_for_caller[slot] = true;
  for (size_t slot : intermediate_slots_) kept_for_caller[slot] = true;
  for (size_t slot : synchronized_images_) kept_for_caller[slot] = true;
  if (result_slot_ != kNoSlot) kept_for_caller[result_slot_] = true;
  std::vector<size_t> last_step(image_count, kNoSlot);
  std::vector<bool> read_overlapped(image_count, false);
  for (size_t i = 0; i < filters_.size(); ++i) {
    last_step[slots[i].result] = i;
    for (size_t slot : slots[i].sources) {
      last_step[slot] = i;
      if (filters_[i]->reads_sources_overlapped()) read_overlapped[slot] = true;
    }
  }
  for (const StepSlots& step : slots) step_result_internal_.push_back(!kept_for_caller[step.result]);
  converts_float16_ = !device_->backend().computes_in_float16();
  released_after_.resize(filters_.size());
  released_before_.assign(filters_.size(), kNoSlot);
  const bool in_place = device_->backend().writes_in_place();
  for (size_t slot = 0; slot < last_step.size(); ++slot) {
    if (kept_for_caller[slot] || read_overlapped[slot] || last_step[slot] == kNoSlot) continue;
    const size_t i = last_step[slot];
    if (in_place && filters_[i]->writes_in_place() && slots[i].sources[0] == slot && slots[i].result != slot)
      released_before_[i] = slot;
    else
      released_after_[i].push_back(slot);
  }
}

void NNGraph::count_source_reads(const std::vector<StepSlots>& slots) {
  auto count = [&](const std::vector<size_t>& sources, std::vector<size_t> StepSlots::*read) {
    std::vector<int64_t> reads(sources.size(), 0);
    for (size_t i = 0; i < sources.size(); ++i)
      for (const StepSlots& step : slots)
        reads[i] += std::count((step.*read).begin(), (step.*read).end(), sources[i]);
    return reads;
  };
  source_image_reads_ = count(source_image_slots_, &StepSlots::sources);
  source_state_reads_ = count(source_state_slots_, &StepSlots::source_states);
}

int64_t NNGraph::read_count_for_source_image(size_t index) const {
  if (index >= source_image_reads_.size())
    fail<ArgumentError>("NNGraph: read_count_for_source_image: index ", index, " is past the ",
                        source_image_reads_.size(), " source images (source_image_handles)");
  return source_image_reads_[index];
}

int64_t NNGraph::read_count_for_source_state(size_t index) const {
  if (index >= source_state_reads_.size())
    fail<ArgumentError>("NNGraph: read_count_for_source_state: index ", index, " is past the ",
                        source_state_reads_.size(), " source states (source_state_handles)");
  return source_state_reads_[index];
}

// Each filter makes its step's kernels; a gradient filter finds its forward
// filter's kernel among those made before it.
void NNGraph::compile_steps(std::vector<StepSlots>& slots) {
  allocator_ = std::make_shared<GraphImageAllocator>();
  std::unordered_map<const FilterNode*, std::shared_ptr<Kernel>> kernels;
  for (size_t i = 0; i < filters_.size(); ++i) {
    slots[i].kernels = &kernels;
    slots[i].allocator = allocator_;
    steps_.push_back(filters_[i]->compile(slots[i]));
    slots[i].kernels = nullptr;
  }
}

// MPSNNGraph.h: for a result, "the imageAllocator for this node is ignored
// and the MPSNNGraph.destinationImageAllocator is used".
const std::shared_ptr<ImageAllocator>& NNGraph::step_allocator(size_t step) const {
  const ImageNode* image = step_results_[step];
  for (const auto& result : results_)
    if (result.get() == image) return destination_image_allocator;
  return image->image_allocator;
}

// The node's format, else the graph's; but float32 for an image no caller
// sees, made by the graph's own allocator, where float16 images would be
// converted to float32 by every kernel that reads or writes them: the
// conversions then happen once, where the graph's sources and results are.
DataType NNGraph::step_format(size_t step, bool node_allocator) const {
  if (step_formats_[step]) return *step_formats_[step];
  if (format_ == DataType::Float16 && step_result_internal_[step] && !node_allocator && converts_float16_)
    return DataType::Float32;
  return format_;
}

void NNGraph::set_format(DataType format) {
  if (format != DataType::Float16 && format != DataType::Float32)
    fail<ArgumentError>("NNGraph: format must be float16 or float32, given ", name_of(format));
  format_ = format;
}

NNGraph::Encoded NNGraph::encode(CommandBuffer& command_buffer, const std::vector<std::shared_ptr<Image>>& source_images,
                                 const std::vector<std::shared_ptr<State>>& source_states) {
  command_buffer.check_encodable();
  // Not a wait: a thread waiting here while holding what the encoding thread
  // needs (Python's GIL, for a data source's update) would never return.
  std::unique_lock<std::mutex> lock(encode_mutex_, std::try_to_lock);
  if (!lock) fail<StateError>("NNGraph: the graph is being encoded already (by another thread, or by a data source its encode called); encode it from one thread at a time");
  if (source_images.size() != source_images_.size())
    fail<ArgumentError>("NNGraph: expected ", source_images_.size(), " source images (source_image_handles), given ",
                        source_images.size());
  if (source_states.size() != source_states_.size())
    fail<ArgumentError>("NNGraph: expected ", source_states_.size(), " source states (source_state_handles), given ",
                        source_states.size());
  for (size_t i = 0; i < source_images.size(); ++i)
    if (!source_images[i]) fail<TypeMismatchError>("NNGraph: expected source image ", i, ", given None");
  for (size_t i = 0; i < source_states.size(); ++i)
    if (!source_states[i]) fail<TypeMismatchError>("NNGraph: expected source state ", i, ", given None");
  if (!capture_encodes) capture_.reset();
  Encoded encoded;
  if (capturable_on(command_buffer, source_images, source_states) &&
      encode_capturing(command_buffer, source_images, source_states, encoded))
    return encoded;
  return encode_steps(command_buffer, source_images, source_states);
}

void update_or_defer(GraphStep& step, CommandBuffer& command_buffer, GraphValues& values,
                     const std::shared_ptr<State>& state) {
  if (values.deferred_updates) {
    values.deferred_updates->emplace_back(&step, state);
    return;
  }
  values.updates_overlapped = true;
  auto encode_update = [&] { step.encode_update(command_buffer, state); };
  command_buffer.record_overlapped(encode_update);
}

NNGraph::Encoded NNGraph::encode_steps(CommandBuffer& command_buffer,
                                       const std::vector<std::shared_ptr<Image>>& source_images,
                                       const std::vector<std::shared_ptr<State>>& source_states) {
  for (size_t i = 0; i < source_images.size(); ++i) values_.images[source_image_slots_[i]] = source_images[i];
  for (size_t i = 0; i < source_states.size(); ++i) values_.states[source_state_slots_[i]] = source_states[i];
  Encoded encoded;
  // Whatever an encode leaves deferred is dropped, thrown or not.
  struct ClearDeferred {
    NNGraph& graph;
    ~ClearDeferred() {
      graph.values_.deferred_updates = nullptr;
      graph.values_.updates_overlapped = false;
      graph.deferred_.clear();
      graph.gradients_.clear();
      if (graph.data_parallel_) graph.data_parallel_->forget_overlapped();
    }
  } clear_deferred{*this};
  size_t updated = 0;  // deferred updates encoded so far
  auto encode_updates = [&] {
    for (; updated < deferred_.size(); ++updated)
      deferred_[updated].first->encode_update(command_buffer, deferred_[updated].second);
  };
  try {
    if (data_parallel_) values_.deferred_updates = &deferred_;
    for (size_t i = 0; i < steps_.size(); ++i) {
      allocator_->node_allocator = step_allocator(i);
      allocator_->format = step_format(i, allocator_->node_allocator != nullptr);
      if (released_before_[i] != kNoSlot) allocator_->release(values_.images[released_before_[i]]);
      const size_t deferred = deferred_.size();
      steps_[i]->encode(command_buffer, values_);
      for (size_t slot : released_after_[i]) allocator_->release(values_.images[slot]);
      // The new gradients go to the group's filling bucket, whose all-reduce runs beside the rest of the
      // backward pass once it is full, and the updates from them after it.
      if (deferred_.size() > deferred) {
        gradients_.clear();
        deferred_.back().second->append_trainable_gradients(gradients_);
        data_parallel_->encode_all_reduce_overlapped(command_buffer, gradients_, ReduceOperation::Mean,
                                                     trainable_gradient_bytes_);
        if (!data_parallel_->overlapped_filling()) data_parallel_->encode_overlapped(command_buffer, encode_updates);
      }
    }
    if (!deferred_.empty()) {
      data_parallel_->encode_join(command_buffer);
      encode_updates();
    }
    if (values_.updates_overlapped) command_buffer.record_join_overlapped();
    for (size_t slot : synchronized_images_) values_.images[slot]->synchronize(command_buffer);
    for (size_t slot : synchronized_states_)
      if (values_.states[slot]) values_.states[slot]->synchronize(command_buffer);
    if (result_slot_ != kNoSlot) encoded.result = values_.images[result_slot_];
    for (size_t slot : intermediate_slots_) encoded.intermediate_images.push_back(values_.images[slot]);
    for (size_t slot : result_state_slots_) encoded.result_states.push_back(values_.states[slot]);
    // Each new state once, however many slots export it.
    if (output_state_is_temporary)
      for (const auto& state : encoded.result_states)
        if (state && !state->is_temporary()) state->make_temporary(command_buffer);
  } catch (...) {
    allocator_->clear();
    for (auto& image : values_.images) image.reset();
    for (auto& state : values_.states) state.reset();
    throw;
  }
  // The graph keeps nothing of an encode: the command buffer holds what it reads.
  allocator_->clear();
  for (auto& image : values_.images) image.reset();
  for (auto& state : values_.states) state.reset();
  return encoded;
}

void NNGraph::set_data_parallel(std::shared_ptr<Communicator> communicator) {
  if (communicator && communicator->device() != device_)
    fail<DeviceMismatchError>("NNGraph: data_parallel: the group's device is ", communicator->device()->name(),
                              ", the graph's ", device_->name());
  std::unique_lock<std::mutex> lock(encode_mutex_, std::try_to_lock);
  if (!lock) fail<StateError>("NNGraph: data_parallel set while another thread encodes this graph");
  data_parallel_ = std::move(communicator);
  trainable_gradient_bytes_ = 0;
  for (const auto& step : steps_) trainable_gradient_bytes_ += step->trainable_gradient_bytes();
}

void NNGraph::reload_from_data_sources() {
  std::unique_lock<std::mutex> lock(encode_mutex_, std::try_to_lock);
  if (!lock) fail<StateError>("NNGraph: reload_from_data_sources while another thread encodes this graph");
  ++reloads_;  // the kernels' new weights are not those the recording reads
  for (const auto& step : steps_) step->reload_from_data_source();
}

}  // namespace mpsx
