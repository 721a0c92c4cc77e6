// training_graph: an inference graph mirrored backwards into gradient
// filters, the gradients of an image read by several filters summed by
// addition filters.
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "mpsx/errors.h"
#include "mpsx/graph.h"
#include "mpsx/graph/arithmetic.h"

namespace mpsx {

std::vector<std::shared_ptr<FilterNode>> training_graph(const std::shared_ptr<FilterNode>& last,
                                                        std::shared_ptr<ImageNode> source_gradient,
                                                        const TrainingNodeHandler& handler) {
  if (!last) fail<TypeMismatchError>("training_graph: expected a filter node, given None");
  if (last->is_gradient())
    fail<TypeMismatchError>(last->class_name(), ": training_graph starts at the last inference filter, given a "
                                                "gradient filter");
  const std::vector<std::shared_ptr<FilterNode>> forward = upstream(last, false);
  // The gradient of each image so far, summed as they arrive.
  std::unordered_map<const ImageNode*, std::shared_ptr<ImageNode>> gradients;
  std::vector<std::shared_ptr<FilterNode>> termini;
  std::unordered_set<const FilterNode*> consumed;  // gradient filters whose result feeds another
  std::vector<std::shared_ptr<FilterNode>> made;

  auto add_gradient = [&](const std::shared_ptr<ImageNode>& image, std::shared_ptr<ImageNode> gradient,
                          const std::shared_ptr<FilterNode>& inference) {
    auto& sum = gradients[image.get()];
    if (!sum) {
      sum = std::move(gradient);
    } else {  // an image read by several filters: its gradients add up
      auto addition = make_addition_node(sum, gradient);
      addition->training_style = inference->training_style;
      for (const auto& g : {sum, gradient})
        if (auto p = g->producer()) consumed.insert(p.get());
      made.push_back(addition);
      if (handler) handler(addition, inference, image, sum);
      sum = addition->result_image();
    }
  };

  // The gradient of `last`'s result: the one given, or its result itself.
  gradients[last->result_image().get()] = source_gradient ? std::move(source_gradient) : last->result_image();
  for (auto it = forward.rbegin(); it != forward.rend(); ++it) {
    const std::shared_ptr<FilterNode>& f = *it;
    auto found = gradients.find(f->result_image().get());
    std::shared_ptr<ImageNode> gradient = found == gradients.end() ? nullptr : found->second;
    if (!gradient) continue;  // nothing downstream asked for this filter's gradient
    if (f == last && f->result_is_gradient()) {
      // A loss or initial gradient: that gradient is its source's.
      add_gradient(f->sources().front(), gradient, f);
      continue;
    }
    if (auto p = gradient->producer()) consumed.insert(p.get());
    std::vector<std::shared_ptr<FilterNode>> filters = f->gradient_filters({gradient});
    for (size_t i = 0; i < filters.size(); ++i) {
      const std::shared_ptr<FilterNode>& g = filters[i];
      const std::shared_ptr<ImageNode>& source = f->sources()[std::min(i, f->sources().size() - 1)];
      made.push_back(g);
      if (handler) {
        handler(g, f, source, gradient);
      } else {
        g->result_image()->handle = source->handle;
      }
      if (!source->stop_gradient && source->producer()) add_gradient(source, g->result_image(), f);
    }
  }
  for (const auto& g : made)
    if (!consumed.count(g.get())) termini.push_back(g);
  return termini;
}

}  // namespace mpsx
