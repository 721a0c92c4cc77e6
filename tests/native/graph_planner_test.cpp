// The graph compiler's phases and the primitive registry, tested natively
// (tests/test_native.py builds and runs this against the runtime library):
// pruning, neuron fusion and the memory plan of NNGraph, and how the
// registry finds, refuses and forgets a family's primitive.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "mpsx/device.h"
#include "mpsx/errors.h"
#include "mpsx/graph.h"
#include "mpsx/graph/batch_normalization.h"
#include "mpsx/graph/convolution.h"
#include "mpsx/graph/neuron.h"
#include "mpsx/kernels/batch_normalization.h"
#include "mpsx/kernels/convolution.h"
#include "mpsx/registry.h"

namespace {

int failures = 0;

void check(bool ok, const char* what, int line) {
  if (!ok) {
    std::printf("FAILED line %d: %s\n", line, what);
    ++failures;
  }
}
#define CHECK(condition) check((condition), #condition, __LINE__)

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const mpsx::Error& e) {
    return e.what();
  }
  return "";
}

using namespace mpsx;

std::shared_ptr<FilterNode> relu(const std::shared_ptr<ImageNode>& source) {
  return std::make_shared<CNNNeuronNode>(source, NeuronDescriptor{NeuronType::ReLU});
}

std::shared_ptr<Device> cpu() { return Device::named("cpu"); }

// A result nobody needs is not computed, nor is what only it reads.
void pruning() {
  auto source = std::make_shared<ImageNode>();
  auto a = relu(source), b = relu(source);
  auto b2 = relu(b->result_image());
  NNGraph graph(cpu(), {a->result_image(), b2->result_image()}, {true, false});
  CHECK(graph.step_count() == 1);
  CHECK(graph.source_images().size() == 1 && graph.source_images()[0] == source);
  CHECK(error_of([&] { NNGraph(cpu(), {a->result_image()}, {false}); }).find("nothing to encode") !=
        std::string::npos);
}

std::shared_ptr<FilterNode> batch_normalization(const std::shared_ptr<ImageNode>& source) {
  auto weights = std::make_shared<BatchNormalizationWeights>(std::vector<float>{1, 1}, std::vector<float>{0, 0},
                                                             std::vector<float>{0, 0}, std::vector<float>{1, 1},
                                                             1e-5f, 0.1f, "bn");
  return std::make_shared<CNNBatchNormalizationNode>(source, weights);
}

// A neuron after a filter that fuses one runs in that filter's step, unless
// its source is exported or read by another filter.
void fusion() {
  auto source = std::make_shared<ImageNode>();
  auto bn = batch_normalization(source);
  auto after = relu(bn->result_image());
  NNGraph fused(cpu(), {after->result_image()}, {true});
  CHECK(fused.step_count() == 1 && fused.fused_count() == 1);

  bn->result_image()->export_from_graph = true;
  NNGraph exported(cpu(), {after->result_image()}, {true});
  CHECK(exported.step_count() == 2 && exported.fused_count() == 0);
  bn->result_image()->export_from_graph = false;

  auto second_reader = relu(bn->result_image());
  NNGraph read_twice(cpu(), {after->result_image(), second_reader->result_image()}, {true, true});
  CHECK(read_twice.step_count() == 3 && read_twice.fused_count() == 0);
}

// A chain of neurons: every intermediate image goes back to the graph's
// allocator at its last reader (or, where the backend writes in place, the
// next neuron writes over it); the source and the result stay the caller's.
void memory_plan() {
  auto source = std::make_shared<ImageNode>();
  auto first = relu(source), second = relu(first->result_image()), third = relu(second->result_image());
  std::shared_ptr<Device> device = cpu();
  NNGraph graph(device, {third->result_image()}, {true});
  CHECK(graph.step_count() == 3);
  const auto& after = graph.released_after();
  const auto& before = graph.released_before();
  CHECK(after.size() == 3 && before.size() == 3);
  size_t released = 0;
  for (size_t i = 0; i < 3; ++i) released += after[i].size() + (before[i] != SIZE_MAX);
  CHECK(released == 2);  // the two intermediates, each once
  CHECK(after[0].empty() && before[0] == SIZE_MAX);  // the source is the caller's
  if (device->backend().writes_in_place()) {
    CHECK(before[1] != SIZE_MAX && before[2] != SIZE_MAX && before[1] != before[2]);
  } else {
    CHECK(after[1].size() == 1 && after[2].size() == 1 && after[1][0] != after[2][0]);
  }
}

size_t released_count(const NNGraph& graph) {
  size_t released = 0;
  for (size_t i = 0; i < graph.step_count(); ++i)
    released += graph.released_after()[i].size() + (graph.released_before()[i] != SIZE_MAX);
  return released;
}

// A training graph's convolution gradients that update weights compute them
// as overlapped work: the images they read (the second convolution's
// source, the gradient at the first's result) go to no later step, which
// they would without updates.
void overlapped_reads() {
  auto graph_of = [](TrainingStyle style) {
    ConvolutionDescriptor d;
    d.kernel_width = d.kernel_height = 3;
    d.input_feature_channels = d.output_feature_channels = 2;
    auto convolution = [&](const std::shared_ptr<ImageNode>& source) {
      auto weights = std::make_shared<ConvolutionWeights>(d, std::vector<float>(d.weight_count(), 0.1f),
                                                          std::vector<int64_t>{}, std::nullopt, "convolution");
      auto node = std::make_shared<CNNConvolutionNode>(source, weights);
      node->training_style = style;
      return node;
    };
    auto source = std::make_shared<ImageNode>();
    auto first = convolution(source);
    auto second = convolution(relu(first->result_image())->result_image());
    std::vector<std::shared_ptr<ImageNode>> results;
    for (const auto& terminus : training_graph(second, std::make_shared<ImageNode>(), nullptr))
      results.push_back(terminus->result_image());
    return std::make_unique<NNGraph>(cpu(), results, std::vector<bool>(results.size(), true));
  };
  std::unique_ptr<NNGraph> updating = graph_of(TrainingStyle::Gpu), fixed = graph_of(TrainingStyle::None);
  CHECK(updating->step_count() == 6 && fixed->step_count() == 6);
  CHECK(released_count(*fixed) == released_count(*updating) + 2);
}

// A family of this test's own, registered for the cpu backend only.
struct TestPrimitive {
  static constexpr const char* family = "native_test";
  using Descriptor = int;
  virtual ~TestPrimitive() = default;
  virtual int value() const = 0;
};

struct Doubler final : TestPrimitive {
  explicit Doubler(int v) : v_(v) {}
  int value() const override { return 2 * v_; }
  int v_;
};

std::unique_ptr<TestPrimitive> make_doubler(Backend&, const int& descriptor) {
  return std::make_unique<Doubler>(descriptor);
}

const RegisterPrimitive<TestPrimitive> registered("cpu", make_doubler);

struct Unregistered {
  static constexpr const char* family = "native_test_unregistered";
  using Descriptor = int;
};

void registry() {
  Backend& backend = cpu()->backend();
  CHECK(make_primitive<TestPrimitive>(backend, 21)->value() == 42);
  const std::string missing = error_of([&] { primitive_maker<Unregistered>(backend); });
  CHECK(missing.find("native_test_unregistered") != std::string::npos);
  CHECK(missing.find("cpu") != std::string::npos);
  unregister_primitive("native_test", "cpu");
  CHECK(error_of([&] { make_primitive<TestPrimitive>(backend, 1); }).find("native_test") != std::string::npos);
}

}  // namespace

int main() {
  pruning();
  fusion();
  memory_plan();
  overlapped_reads();
  registry();
  std::printf("%s: %d failed checks\n", failures ? "FAILED" : "passed", failures);
  return failures ? 1 : 0;
}
