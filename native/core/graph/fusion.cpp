// Neuron fusion, the one phase of the graph compiler that knows particular
// node families.
#include "compiler.h"

#include <utility>

#include "mpsx/graph/neuron.h"

namespace mpsx {

Fusions find_fusions(const std::vector<std::shared_ptr<FilterNode>>& filters,
                     const std::unordered_set<const ImageNode*>& needed_results) {
  std::unordered_map<const ImageNode*, std::vector<FilterNode*>> readers;
  for (const auto& f : filters)
    for (const auto& s : f->sources()) readers[s.get()].push_back(f.get());
  auto kept_in_graph = [&](const ImageNode& image) {
    return !image.export_from_graph && !image.synchronize_resource && !needed_results.count(&image);
  };
  auto state_kept_in_graph = [](const StateNode& state) { return !state.export_from_graph && !state.synchronize_resource; };
  // "custom padding policies may prevent the MPSNNGraph from fusing away
  // nodes ... because it doesn't know what the custom padding policy does",
  // unless CustomAllowForNodeFusion says it may.
  auto blocks_fusion = [](const FilterNode& node) {
    return runs_custom_padding(node.padding_method, node.padding_policy.get()) &&
           !(node.padding_method & padding::kCustomAllowForNodeFusion);
  };
  Fusions fusions;
  for (const auto& f : filters) {
    if (f->is_gradient() || !f->fuses_neuron()) continue;
    const std::shared_ptr<ImageNode> result = f->result_image();
    if (!kept_in_graph(*result)) continue;
    // One neuron reads the result; the others reading it are that neuron's
    // gradients, each read by nothing but this filter's gradient.
    CNNNeuronNode* neuron = nullptr;
    std::vector<std::pair<CNNNeuronGradientNode*, const FilterNode*>> gradients;
    bool fusable = true;
    for (FilterNode* reader : readers[result.get()]) {
      if (auto* n = dynamic_cast<CNNNeuronNode*>(reader)) {
        fusable = fusable && !neuron;
        neuron = n;
      } else if (auto* g = dynamic_cast<CNNNeuronGradientNode*>(reader)) {
        const std::vector<FilterNode*>& next = readers[g->result_image().get()];
        const FilterNode* forward_gradient = next.size() == 1 ? next[0] : nullptr;
        fusable = fusable && g->sources()[1] == result && forward_gradient && forward_gradient->fuses_neuron() &&
                  forward_gradient->is_gradient() && forward_gradient->sources()[0] == g->result_image() &&
                  forward_gradient->source_states()[0]->producer() == f && kept_in_graph(*g->result_image()) &&
                  !fusions.neuron.count(forward_gradient);
        gradients.emplace_back(g, forward_gradient);
      } else {
        fusable = false;
      }
    }
    if (!fusable || !neuron || blocks_fusion(*f) || blocks_fusion(*neuron)) continue;
    const std::vector<std::shared_ptr<StateNode>> states = neuron->result_states();
    for (const auto& [g, forward_gradient] : gradients)
      fusable = fusable && g->source_states()[0] == states[0] && g->descriptor() == neuron->descriptor();
    if (!fusable || !state_kept_in_graph(*states[0])) continue;
    fusions.neuron[f.get()] = &neuron->descriptor();
    fusions.alias[result.get()] = neuron->result_image();
    fusions.absorbed.insert(neuron);
    for (const auto& [g, forward_gradient] : gradients) {
      fusions.neuron[forward_gradient] = &neuron->descriptor();
      fusions.alias[g->result_image().get()] = g->sources()[0];
      fusions.absorbed.insert(g);
    }
  }
  return fusions;
}

}  // namespace mpsx
