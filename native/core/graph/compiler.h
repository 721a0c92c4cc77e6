// What the phases of the graph compiler (NNGraph's constructor, graph.cpp)
// share. Internal to native/core/graph.
#pragma once

#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "mpsx/graph.h"

namespace mpsx {

// The fusions of a graph's filters: a neuron after a filter that fuses one
// runs in that filter's step, and the neuron's gradient in the filter's
// gradient, where nothing else reads the images between them.
struct Fusions {
  std::unordered_map<const FilterNode*, const NeuronDescriptor*> neuron;  // of each fusing filter
  std::unordered_set<const FilterNode*> absorbed;                          // the neurons and their gradients
  // Images that are not made: each stands for another (the fused filter
  // writes the neuron's result; its gradient reads the neuron's source
  // gradient).
  std::unordered_map<const ImageNode*, std::shared_ptr<ImageNode>> alias;

  std::shared_ptr<ImageNode> resolve(std::shared_ptr<ImageNode> image) const {
    for (auto it = alias.find(image.get()); it != alias.end(); it = alias.find(image.get())) image = it->second;
    return image;
  }
};

// The slots of a graph's values: every image and state node the steps read
// or write, numbered as first met. A node that no required filter writes is
// a source of the graph, added to its sources in that order.
struct SlotNumbering {
  const std::unordered_set<const FilterNode*>& required;
  std::vector<std::shared_ptr<ImageNode>>& source_images;
  std::vector<size_t>& source_image_slots;
  std::vector<std::shared_ptr<StateNode>>& source_states;
  std::vector<size_t>& source_state_slots;
  std::unordered_map<const ImageNode*, size_t> images{};
  std::unordered_map<const StateNode*, size_t> states{};

  size_t image(const std::shared_ptr<ImageNode>& node) { return number(images, node, source_images, source_image_slots); }
  size_t state(const std::shared_ptr<StateNode>& node) { return number(states, node, source_states, source_state_slots); }

 private:
  template <class Node>
  size_t number(std::unordered_map<const Node*, size_t>& numbers, const std::shared_ptr<Node>& node,
                std::vector<std::shared_ptr<Node>>& sources, std::vector<size_t>& source_slots) {
    auto [it, added] = numbers.emplace(node.get(), numbers.size());
    if (added && !(node->producer() && required.count(node->producer().get()))) {
      sources.push_back(node);
      source_slots.push_back(it->second);
    }
    return it->second;
  }
};

// Where neurons fuse among `filters` (the required ones), leaving alone the
// images the caller needs (`needed_results`) or exports.
Fusions find_fusions(const std::vector<std::shared_ptr<FilterNode>>& filters,
                     const std::unordered_set<const ImageNode*>& needed_results);

}  // namespace mpsx
