// MPSNNGraph and its nodes (MPSNNGraph.h, MPSNNGraphNodes.h): image and
// state nodes connect filter nodes; a filter node of every family makes its
// gradient node; training_graph mirrors an inference graph backwards; NNGraph
// compiles the nodes a set of results needs into steps once and encodes
// them in one call.
//
// Ownership runs backwards, towards the sources, as in MPS: a filter owns its
// result image and states (a pointer to one shares the filter's ownership),
// and a filter keeps its sources alive, so that holding the last result
// image holds the whole graph.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <unordered_map>
#include <unordered_set>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "mpsx/capture.h"
#include "mpsx/errors.h"
#include "mpsx/image.h"
#include "mpsx/kernel.h"
#include "mpsx/state.h"

namespace mpsx {

class CommandBuffer;
class CommandQueue;
class Buffer;
class Communicator;
class Device;
class FilterNode;
class GraphImageAllocator;
struct NeuronDescriptor;

// An MPSHandle: whatever the caller names a node with. Native code keeps it
// and gives it back; it never looks inside (Python: a reference to the
// object).
using NodeHandle = std::shared_ptr<void>;

// MPSNNImageNode.
class ImageNode {
 public:
  explicit ImageNode(NodeHandle handle = nullptr) : handle(std::move(handle)) {}
  NodeHandle handle;
  bool export_from_graph = false;
  bool synchronize_resource = false;
  // training_graph does not go past this image.
  bool stop_gradient = false;
  // The storage of the image (float32 or float16); unset, the graph's format.
  std::optional<DataType> format;
  // MPSNNImageNode.imageAllocator: what makes the image when a graph
  // encodes; null, the graph's own (its memory plan).
  std::shared_ptr<ImageAllocator> image_allocator;
  // The filter that writes this image; null for a source of the graph.
  std::shared_ptr<FilterNode> producer() const;

 private:
  friend class FilterNode;
  FilterNode* producer_ = nullptr;  // the owner of a result image
};

// What a state node carries, which decides the filters it may feed.
enum class StateNodeKind : uint8_t {
  Gradient,             // MPSNNGradientStateNode
  ConvolutionGradient,  // MPSCNNConvolutionGradientStateNode
  BinaryGradient,       // MPSNNBinaryGradientStateNode (arithmetic)
  ConvolutionTransposeGradient,  // MPSCNNConvolutionTransposeGradientStateNode
  Labels,               // MPSNNLabelsNode: the loss labels, a source state
};

// MPSNNStateNode and its subclasses (kind).
class StateNode {
 public:
  explicit StateNode(StateNodeKind kind, NodeHandle handle = nullptr) : handle(std::move(handle)), kind_(kind) {}
  NodeHandle handle;
  bool export_from_graph = false;
  bool synchronize_resource = false;
  StateNodeKind kind() const { return kind_; }
  const char* class_name() const;
  // The filter that makes this state; null for a source state (labels).
  std::shared_ptr<FilterNode> producer() const;

 private:
  friend class FilterNode;
  StateNodeKind kind_;
  FilterNode* producer_ = nullptr;  // the owner of a result state
};

// MPSNNTrainingStyle: which of the data source's updates a trainable node's
// gradient calls; the gradient nodes made from a node take its style.
enum class TrainingStyle : uint8_t { None = 0, Cpu = 1, Gpu = 2 };

// The images and states of one encode of a compiled graph, by the slots the
// graph gave its nodes when it compiled.
class GraphStep;
struct GraphValues {
  std::vector<std::shared_ptr<Image>> images;
  std::vector<std::shared_ptr<State>> states;
  // Set while a data-parallel graph encodes: the trainable gradient steps
  // leave their updates here, with the state whose gradients they read, for
  // the graph to encode after it has all-reduced those gradients.
  std::vector<std::pair<GraphStep*, std::shared_ptr<State>>>* deferred_updates = nullptr;
  // Whether updates run as overlapped work that the graph joins at the end.
  bool updates_overlapped = false;
};

// One filter of a compiled graph: its kernels, made once, and the slots it
// reads and writes.
class GraphStep {
 public:
  virtual ~GraphStep() = default;
  virtual void encode(CommandBuffer& command_buffer, GraphValues& values) = 0;
  // -reloadFromDataSources for filters with a data source.
  virtual void reload_from_data_source() {}
  // A trainable gradient step's update of its forward filter's values from
  // the gradients in `state` (update_or_defer calls it).
  virtual void encode_update(CommandBuffer& /*command_buffer*/, const std::shared_ptr<State>& /*state*/) {}
  // The bytes of the gradients whose update a trainable gradient step defers
  // in a data-parallel graph (its state's append_trainable_gradients); 0 for
  // the others.
  virtual size_t trainable_gradient_bytes() const { return 0; }
};

// What a trainable gradient step does after its gradient encode: its update
// as overlapped work (ExecutionContext::begin_overlapped), beside the rest of
// the backward pass, which reads and writes nothing the update does, until
// the graph joins it at the end of its encode; in a data-parallel graph,
// after the graph's all-reduce.
void update_or_defer(GraphStep& step, CommandBuffer& command_buffer, GraphValues& values,
                     const std::shared_ptr<State>& state);

class UnaryKernel;
class GradientKernel;

// What a filter node compiles against: the device, the slots of its images
// and states, and the kernels of the filters compiled before it (a gradient
// filter updates its forward filter's weights).
struct StepSlots {
  std::shared_ptr<Device> device;
  std::unordered_map<const FilterNode*, std::shared_ptr<Kernel>>* kernels = nullptr;
  std::vector<size_t> sources, source_states;
  size_t result = 0;
  // Whether anything reads the result image: a filter of the graph, the
  // caller (a needed result, an export) or the host (synchronize_resource).
  // A filter may skip computing it where it has other work (a gradient
  // filter's weight gradients).
  bool result_needed = true;
  // SIZE_MAX where no needed filter reads the result state: none is made.
  std::vector<size_t> result_states;
  // The neuron that follows the filter, fused into it (fuses_neuron()): a
  // forward filter applies it to its result, which is the neuron's; its
  // gradient filter takes the gradient of the neuron's result. Null if none.
  const NeuronDescriptor* fused_neuron = nullptr;
  // The graph's allocator of the images its kernels make.
  std::shared_ptr<ImageAllocator> allocator;
};

// Where a gradient filter's step reads and writes a graph's values: the
// gradient of the forward result, the forward source, the gradient state,
// and its result (the gradient of the forward source).
struct GradientSlots {
  explicit GradientSlots(const StepSlots& slots)
      : source_gradient(slots.sources.at(0)),
        source(slots.sources.at(1)),
        state(slots.source_states.at(0)),
        result(slots.result) {}

  // The gradient state as an S; otherwise TypeMismatchError, its message
  // the `expected` pieces then ", given " and the state's class (a state
  // the forward node of another family made).
  template <class S, class... Expected>
  std::shared_ptr<S> state_as(const GraphValues& values, const Expected&... expected) const {
    const std::shared_ptr<State>& given = values.states[state];
    auto s = std::dynamic_pointer_cast<S>(given);
    if (!s) fail<TypeMismatchError>(expected..., ", given ", given ? given->class_name() : "None");
    return s;
  }

  size_t source_gradient, source, state, result;
};

// A kernel of a graph: made on the graph's device, making its destinations
// with the graph's allocator.
template <class K, class... Args>
std::shared_ptr<K> graph_kernel(const StepSlots& slots, Args&&... args) {
  auto kernel = std::make_shared<K>(slots.device, std::forward<Args>(args)...);
  kernel->destination_image_allocator = slots.allocator;
  return kernel;
}

// MPSNNFilterNode.
class FilterNode : public std::enable_shared_from_this<FilterNode> {
 public:
  // Releases what the filter holds (its sources, which hold their producers,
  // and so on) in a loop rather than by nested destructors: a chain of any
  // depth is freed without exhausting the stack.
  virtual ~FilterNode();
  // The MPS class name, for messages.
  virtual const char* class_name() const = 0;

  const std::vector<std::shared_ptr<ImageNode>>& sources() const { return sources_; }
  const std::vector<std::shared_ptr<StateNode>>& source_states() const { return source_states_; }
  std::shared_ptr<ImageNode> result_image();
  // The result states (resultStates); a filter that makes none has none.
  std::vector<std::shared_ptr<StateNode>> result_states();

  std::string label;
  // paddingPolicy: MPSNNPaddingMethod bits (the filter's default unless
  // set), and the MPSNNPadding object they came from, or null.
  uint32_t padding_method;
  std::shared_ptr<const PaddingPolicy> padding_policy;
  // Gives `kernel` this filter's padding policy.
  void configure_padding(Kernel& kernel) const {
    kernel.padding_method = padding_method;
    kernel.padding_policy = padding_policy;
  }

  // -gradientFilterWithSources: / -gradientFiltersWithSources:, the forward
  // source images and result states wired in. Gradient filters throw.
  virtual bool is_gradient() const { return false; }
  std::vector<std::shared_ptr<FilterNode>> gradient_filters(
      const std::vector<std::shared_ptr<ImageNode>>& gradient_images);

  // What the binding made this filter from (Python: its constructor's
  // arguments), kept so that a saved graph can make it again; native code
  // never looks inside. Null for a filter made natively.
  std::shared_ptr<void> constructor_arguments;
  // A filter gradient_filters made: the forward filter, the gradient images
  // it was given, and this filter's place among those it made.
  struct GradientOrigin {
    std::shared_ptr<FilterNode> forward;
    std::vector<std::shared_ptr<ImageNode>> gradient_images;
    size_t index = 0;
  };
  const std::optional<GradientOrigin>& gradient_origin() const { return gradient_origin_; }

  // MPSNNTrainableNode's trainingStyle, for the filters that have one.
  virtual bool is_trainable() const { return false; }
  TrainingStyle training_style = TrainingStyle::Gpu;
  // Whether this (gradient) filter updates weights: the graph keeps it
  // though no needed result reads it.
  virtual bool updates_weights() const { return false; }
  // Whether the result image is the gradient of the source (a loss node):
  // training_graph starts from its source.
  virtual bool result_is_gradient() const { return false; }
  // Whether compile takes a following neuron in StepSlots::fused_neuron
  // (a forward filter and the gradient filter it makes).
  virtual bool fuses_neuron() const { return false; }
  // Whether the filter may write its result over its first source where
  // nothing reads that source later (an elementwise filter).
  virtual bool writes_in_place() const { return false; }
  // Whether its step reads its source images also in overlapped work
  // (ExecutionContext::begin_overlapped), beside later steps: the memory
  // plan then gives their storage to no later step.
  virtual bool reads_sources_overlapped() const { return false; }

  // The kernels and encode of this filter in a graph on `slots.device`.
  virtual std::unique_ptr<GraphStep> compile(const StepSlots& slots) const = 0;

 protected:
  FilterNode(std::vector<std::shared_ptr<ImageNode>> sources, std::vector<std::shared_ptr<StateNode>> source_states,
             uint32_t default_padding);
  // The state kinds of resultStates (none by default).
  virtual std::vector<StateNodeKind> result_state_kinds() const { return {}; }
  // One gradient filter per source that gets a gradient, made with the
  // gradient of this filter's result; the default has none (TypeError).
  virtual std::vector<std::shared_ptr<FilterNode>> make_gradient_filters(
      const std::vector<std::shared_ptr<ImageNode>>& gradient_images);

 private:
  std::vector<std::shared_ptr<ImageNode>> sources_;
  std::vector<std::shared_ptr<StateNode>> source_states_;
  ImageNode result_image_;
  std::deque<StateNode> result_states_;  // made on first ask
  bool result_states_made_ = false;
  std::optional<GradientOrigin> gradient_origin_;
};

// A forward filter whose one result state, of `result_state` kind, feeds
// the gradient filters it makes.
class ForwardFilterNode : public FilterNode {
 protected:
  explicit ForwardFilterNode(std::vector<std::shared_ptr<ImageNode>> sources,
                             std::vector<std::shared_ptr<StateNode>> source_states = {},
                             StateNodeKind result_state = StateNodeKind::Gradient)
      : FilterNode(std::move(sources), std::move(source_states), padding::kDefault), result_state_(result_state) {}
  std::vector<StateNodeKind> result_state_kinds() const override { return {result_state_}; }

 private:
  StateNodeKind result_state_;
};

// A gradient filter of (the gradient of the forward result, the forward
// image its kernel reads, the forward filter's result state).
class GradientFilterNode : public FilterNode {
 public:
  bool is_gradient() const final { return true; }

 protected:
  GradientFilterNode(std::shared_ptr<ImageNode> source_gradient, std::shared_ptr<ImageNode> source_image,
                     std::shared_ptr<StateNode> gradient_state, uint32_t default_padding = padding::kDefault)
      : FilterNode({std::move(source_gradient), std::move(source_image)}, {std::move(gradient_state)},
                   default_padding) {}
};

// A gradient filter that updates its forward filter's weights as its
// training style says.
class TrainableGradientNode : public GradientFilterNode {
 public:
  bool is_trainable() const final { return true; }
  bool updates_weights() const final { return training_style != TrainingStyle::None; }

 protected:
  using GradientFilterNode::GradientFilterNode;
};

// The steps most filters compile to: a forward kernel of one source, writing
// its result (and result state where one is read), and a gradient kernel of
// (gradient, forward source or result, state). The filter sets its kernel's
// padding policy; `reload` is the step's reload_from_data_source (filters
// with a data source).
std::unique_ptr<GraphStep> unary_step(std::shared_ptr<UnaryKernel> kernel, const StepSlots& slots,
                                      std::function<void()> reload = {});
std::unique_ptr<GraphStep> gradient_step(std::shared_ptr<GradientKernel> kernel, const StepSlots& slots);

// The nodes of a family whose kernels are made from one descriptor D that
// both nodes carry. The gradient node's kernel is a K.
template <class K, class D>
class DescribedGradientNode : public GradientFilterNode {
 public:
  const D& descriptor() const { return descriptor_; }
  std::unique_ptr<GraphStep> compile(const StepSlots& slots) const override {
    return gradient_step(graph_kernel<K>(slots, descriptor_), slots);
  }

 protected:
  DescribedGradientNode(std::shared_ptr<ImageNode> source_gradient, std::shared_ptr<ImageNode> source_image,
                        std::shared_ptr<StateNode> gradient_state, D descriptor)
      : GradientFilterNode(std::move(source_gradient), std::move(source_image), std::move(gradient_state)),
        descriptor_(std::move(descriptor)) {}
  D descriptor_;
};

// The forward node: its kernel is a K, and its gradient node a G made from
// (the gradient of its result, its source, its result state, D).
template <class K, class G, class D>
class DescribedForwardNode : public ForwardFilterNode {
 public:
  const D& descriptor() const { return descriptor_; }
  std::unique_ptr<GraphStep> compile(const StepSlots& slots) const override {
    auto kernel = graph_kernel<K>(slots, descriptor_);
    configure_padding(*kernel);
    return unary_step(std::move(kernel), slots);
  }

 protected:
  DescribedForwardNode(std::shared_ptr<ImageNode> source, D descriptor)
      : ForwardFilterNode({std::move(source)}), descriptor_(std::move(descriptor)) {}
  std::vector<std::shared_ptr<FilterNode>> make_gradient_filters(
      const std::vector<std::shared_ptr<ImageNode>>& gradient_images) override {
    return {std::make_shared<G>(gradient_images.front(), sources().front(), result_states().front(), descriptor_)};
  }
  D descriptor_;
};

// What gradient nodes check against the forward node of their state.
//
// TypeMismatchError: `gradient` expected the result state of a `forward`
// node and was given `state` (None, a source state, or another node's).
[[noreturn]] void fail_forward_state(const char* gradient, const char* forward, const StateNode* state);
// The node of type N whose result state `state` is (the state shares its
// ownership), or fail_forward_state.
template <class N>
const N& forward_node_of(const char* gradient, const char* forward, const std::shared_ptr<StateNode>& state) {
  std::shared_ptr<FilterNode> producer = state ? state->producer() : nullptr;
  auto* node = dynamic_cast<const N*>(producer.get());
  if (!node) fail_forward_state(gradient, forward, state.get());
  return *node;
}
// A parameter a gradient node copied from its forward node when it was made:
// ArgumentError naming both values unless they are equal.
void check_forward_parameter(const char* gradient, const char* name, double mine, double forward);
// The same of alpha, beta and delta, in that order (the normalization
// nodes' parameters P).
template <class P>
void check_forward_alpha_beta_delta(const char* gradient, const P& mine, const P& forward) {
  check_forward_parameter(gradient, "alpha", mine.alpha, forward.alpha);
  check_forward_parameter(gradient, "beta", mine.beta, forward.beta);
  check_forward_parameter(gradient, "delta", mine.delta, forward.delta);
}
// ArgumentError: `gradient`'s forward filter did not compile into this graph.
[[noreturn]] void fail_forward_not_compiled(const char* gradient);
// The kernel of type K that the filter making `gradient`'s first source
// state compiled to (its gradient updates that kernel's weights).
template <class K>
std::shared_ptr<K> forward_kernel(const StepSlots& slots, const FilterNode& gradient) {
  const std::shared_ptr<FilterNode> producer = gradient.source_states().front()->producer();
  auto found = producer ? slots.kernels->find(producer.get()) : slots.kernels->end();
  auto kernel = found == slots.kernels->end() ? nullptr : std::dynamic_pointer_cast<K>(found->second);
  if (!kernel) fail_forward_not_compiled(gradient.class_name());
  return kernel;
}
// -trainingGraphWithSourceGradient:nodeHandler: on `last`: the gradient
// filters of every filter between the graph's sources and `last`, summed
// with addition filters where an image feeds several filters, stopping at
// stop_gradient images. The handler sees (gradient, inference, inference
// source, gradient source) for each new gradient filter. Returns the termini.
using TrainingNodeHandler = std::function<void(const std::shared_ptr<FilterNode>& gradient,
                                               const std::shared_ptr<FilterNode>& inference,
                                               const std::shared_ptr<ImageNode>& inference_source,
                                               const std::shared_ptr<ImageNode>& gradient_source)>;
std::vector<std::shared_ptr<FilterNode>> training_graph(const std::shared_ptr<FilterNode>& last,
                                                        std::shared_ptr<ImageNode> source_gradient,
                                                        const TrainingNodeHandler& handler);

// The filters `last` depends on through their source images (and, with
// through_states, their source states), `last` included, producers first (a
// post-order). ArgumentError for a cycle.
std::vector<std::shared_ptr<FilterNode>> upstream(const std::shared_ptr<FilterNode>& last, bool through_states);

// MPSNNGraph: compiled at construction from the filters that the needed
// results and the weight updates require.
struct Fusions;
struct SlotNumbering;

class NNGraph {
 public:
  // initWithDevice:resultImages:resultsAreNeeded: (one result: the
  // resultImage form). The first result is what encode returns.
  NNGraph(std::shared_ptr<Device> device, std::vector<std::shared_ptr<ImageNode>> results,
          std::vector<bool> results_are_needed);

  const std::shared_ptr<Device>& device() const { return device_; }
  // The order encode takes its source images and states in.
  const std::vector<std::shared_ptr<ImageNode>>& source_images() const { return source_images_; }
  const std::vector<std::shared_ptr<StateNode>>& source_states() const { return source_states_; }
  // readCountForSourceImageAtIndex: / readCountForSourceStateAtIndex:: how
  // many times an encode's steps read source image (state) `index`, by how
  // much the encode lowers a temporary one's read count. ArgumentError for
  // an index past the sources.
  int64_t read_count_for_source_image(size_t index) const;
  int64_t read_count_for_source_state(size_t index) const;
  // Exported intermediate images (and the results after the first), and the
  // exported states, in the order encode returns them.
  const std::vector<std::shared_ptr<ImageNode>>& intermediate_images() const { return intermediate_images_; }
  const std::vector<std::shared_ptr<StateNode>>& result_states() const { return result_states_; }
  const std::shared_ptr<ImageNode>& result() const { return results_[0]; }
  bool result_image_is_needed() const { return results_needed_[0]; }
  // The results and whether each is needed, as constructed.
  const std::vector<std::shared_ptr<ImageNode>>& results() const { return results_; }
  const std::vector<bool>& results_are_needed() const { return results_needed_; }
  size_t step_count() const { return steps_.size(); }
  // MPSNNGraph.format: the storage of the images the graph makes whose node
  // sets none; float16 (MPS's default) or float32, else ArgumentError.
  DataType format() const { return format_; }
  void set_format(DataType format);
  // MPSNNGraph.outputStateIsTemporary: the states encode returns are
  // temporary for its command buffer (State::make_temporary).
  bool output_state_is_temporary = false;
  // MPSNNGraph.destinationImageAllocator: what makes the result images, in
  // place of their nodes' image_allocator; null, the graph's own.
  std::shared_ptr<ImageAllocator> destination_image_allocator;
  // Self-capture (graph/capture.cpp). An encode onto a command buffer that
  // is not replayable, with the sizes and settings of the encode before it,
  // records the step once onto a replayable command buffer of the graph's
  // own, over stand-ins of its source images and states; each later encode
  // with them encodes copies of its sources into the stand-ins, a run of
  // that recording (one CUDA graph launch on cuda) and copies of the
  // results out into new images. A step whose encode resolves a value anew
  // each time (Adam's time step, dropout masks) or calls back into the
  // program (a Python data source, image allocator or padding policy, a
  // host update) is encoded each time instead. On unless the environment
  // sets MPSX_CAPTURE_ENCODES=0 when the graph is made.
  bool capture_encodes = capture_encodes_by_default();
  // The encodes that ran a recording.
  uint64_t captured_encode_count() const { return captured_encode_count_; }
  // Filters that compiled into another's step (a neuron fused into the
  // normalization before it, and its gradient).
  size_t fused_count() const { return fused_count_; }
  // The memory plan, for tests: per step, the image slots released after it,
  // and the slot whose storage it writes over (SIZE_MAX: none).
  const std::vector<std::vector<size_t>>& released_after() const { return released_after_; }
  const std::vector<size_t>& released_before() const { return released_before_; }

  struct Encoded {
    std::shared_ptr<Image> result;  // null unless the result is needed
    std::vector<std::shared_ptr<Image>> intermediate_images;
    std::vector<std::shared_ptr<State>> result_states;
  };
  // encodeBatchToCommandBuffer:sourceImages:sourceStates:intermediateImages:
  // destinationStates:, each Image a batch. Checks the counts before
  // encoding; a step that throws leaves what it recorded to the caller's
  // discard.
  Encoded encode(CommandBuffer& command_buffer, const std::vector<std::shared_ptr<Image>>& source_images,
                 const std::vector<std::shared_ptr<State>>& source_states);
  // -reloadFromDataSources.
  void reload_from_data_sources();
  // Data-parallel training (null: none): each encode all-reduces, as the
  // mean over the group, the gradients every trainable gradient filter
  // computed (in buckets, during the backward pass), and encodes their
  // updates after them.
  // DeviceMismatchError for a group of another device.
  const std::shared_ptr<Communicator>& data_parallel() const { return data_parallel_; }
  void set_data_parallel(std::shared_ptr<Communicator> communicator);

 private:
  // The compiler's phases, in the constructor's order (graph.cpp), and what
  // they share.
  void check_results() const;
  std::vector<std::shared_ptr<FilterNode>> required_filters(std::unordered_set<const FilterNode*>& required) const;
  std::vector<StepSlots> assign_source_slots(SlotNumbering& numbering, const Fusions& fusions);
  void assign_result_slots(std::vector<StepSlots>& slots, SlotNumbering& numbering, const Fusions& fusions);
  void plan_memory(const std::vector<StepSlots>& slots, size_t image_count);
  void count_source_reads(const std::vector<StepSlots>& slots);
  void compile_steps(std::vector<StepSlots>& slots);
  std::unordered_set<const ImageNode*> needed_results() const;

  // encode() once its arguments are checked: each step's encode.
  Encoded encode_steps(CommandBuffer& command_buffer, const std::vector<std::shared_ptr<Image>>& source_images,
                       const std::vector<std::shared_ptr<State>>& source_states);
  // Self-capture (graph/capture.cpp). What a recording was made for, beside
  // the sizes of its states (State::pair_with_stand_in).
  struct CaptureKey {
    const CommandQueue* queue = nullptr;
    uint64_t generation = 0;  // capture_generation() and reloads
    DataType format = DataType::Float16;
    std::vector<const ImageAllocator*> allocators;  // each step's
    std::vector<ImageDescriptor> sources;
    bool operator==(const CaptureKey& other) const;
  };
  struct Capture;
  // Whether this encode may run a recording: capture is on, the graph and
  // the command buffer allow it, and the encode of the steps would not
  // raise for the temporary sources.
  bool capturable_on(const CommandBuffer& command_buffer, const std::vector<std::shared_ptr<Image>>& source_images,
                     const std::vector<std::shared_ptr<State>>& source_states) const;
  // The encode of a capturable call: a run of the recording made for its
  // key, or a new recording where the encode before had the same key.
  // False, encoding nothing, where neither is made.
  bool encode_capturing(CommandBuffer& command_buffer, const std::vector<std::shared_ptr<Image>>& source_images,
                        const std::vector<std::shared_ptr<State>>& source_states, Encoded& encoded);
  void fill_capture_key(CaptureKey& key, const CommandBuffer& command_buffer,
                        const std::vector<std::shared_ptr<Image>>& source_images) const;
  bool record_capture(CommandBuffer& command_buffer, const std::vector<std::shared_ptr<Image>>& source_images,
                      const std::vector<std::shared_ptr<State>>& source_states, Encoded& encoded);
  bool describe_outputs(Capture& capture, const Encoded& made) const;
  // Encodes a run of the recording; false, encoding nothing, where this
  // encode's states do not fit it.
  bool encode_captured(CommandBuffer& command_buffer, const std::vector<std::shared_ptr<Image>>& source_images,
                       const std::vector<std::shared_ptr<State>>& source_states, Encoded& encoded);

  std::shared_ptr<Device> device_;
  std::vector<std::shared_ptr<ImageNode>> results_;
  std::vector<bool> results_needed_;
  std::vector<std::shared_ptr<ImageNode>> source_images_, intermediate_images_;
  std::vector<std::shared_ptr<StateNode>> source_states_, result_states_;
  // Slots of the sources, exported intermediates and results, exported states.
  std::vector<size_t> source_image_slots_, source_state_slots_, intermediate_slots_, result_state_slots_;
  // The reads of each source image and state by the steps.
  std::vector<int64_t> source_image_reads_, source_state_reads_;
  // Written images and states whose node asks for synchronize_resource.
  std::vector<size_t> synchronized_images_, synchronized_states_;
  size_t result_slot_ = 0;
  std::vector<std::unique_ptr<GraphStep>> steps_;
  // The memory plan: the format of each step's result, the images whose
  // last reader each step is (their storage goes to later steps of the same
  // encode), and the steps that write over their first source.
  DataType format_ = DataType::Float16;
  std::vector<std::optional<DataType>> step_formats_;
  // The image node each step writes (a fused step: its neuron's), whose
  // allocator makes it (step_allocator).
  std::vector<const ImageNode*> step_results_;
  const std::shared_ptr<ImageAllocator>& step_allocator(size_t step) const;
  // Whether each step's result is an image no caller sees; whether the
  // backend's kernels compute float16 images on float32 copies; the format
  // of the storage a step's result gets (made by its node's allocator or not).
  std::vector<bool> step_result_internal_;
  bool converts_float16_ = false;
  DataType step_format(size_t step, bool node_allocator) const;
  std::vector<std::vector<size_t>> released_after_;
  std::vector<size_t> released_before_;
  std::shared_ptr<GraphImageAllocator> allocator_;
  size_t fused_count_ = 0;
  // Kept nodes: the steps refer to their slots only.
  std::vector<std::shared_ptr<FilterNode>> filters_;
  // Held while encoding: the encodes share the slots, so an encode from a
  // second thread meanwhile is refused (StateError).
  std::mutex encode_mutex_;
  GraphValues values_;
  std::shared_ptr<Communicator> data_parallel_;
  // A data-parallel encode's deferred updates, and the gradients of the last
  // (reused, as deferred_ is).
  std::vector<std::pair<GraphStep*, std::shared_ptr<State>>> deferred_;
  std::vector<std::shared_ptr<Buffer>> gradients_;
  // The bytes a data-parallel encode all-reduces: the trainable steps'
  // gradients.
  size_t trainable_gradient_bytes_ = 0;
  // The slot each step writes.
  std::vector<size_t> step_result_slots_;
  std::shared_ptr<Capture> capture_;  // shared: its type is complete in capture.cpp alone
  // The last capturable encode's key, and room for the next one's.
  CaptureKey last_key_, next_key_;
  uint64_t reloads_ = 0;
  uint64_t captured_encode_count_ = 0;
};

}  // namespace mpsx
