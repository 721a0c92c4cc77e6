"""Trains the reference CNN (benchmarks/reference_cnn.py) through an NNGraph
made by training_graph (GraphReferenceCNN), on random data with the default
device; prints the loss of every step.

    python examples/train_reference_cnn_graph.py [--device NAME] [--batch-size N] [--steps N] [--style gpu|cpu|none]

--style says who updates the weights: gpu, the graph on the command buffer
(ConvolutionWeights with an optimizer); cpu, the graph calling each data
source's host update once the step's command buffer completed; none, nobody
in the graph: it exports the gradient states and the model encodes the SGD
updates by hand after it.
"""

import functools

import mpsx
from mpsx.benchmarks.reference_cnn import GraphReferenceCNN, HostSGD, random_batch
from train_reference_cnn import parser, train  # the hand-encoded example, in this folder

LEARNING_RATE, MOMENTUM = 0.001, 0.9


def main():
    options = parser(__doc__.splitlines()[0])
    options.add_argument("--style", choices=["gpu", "cpu", "none"], default="gpu",
                         help="the training style: who updates the weights (default gpu)")
    args = options.parse_args()

    device = mpsx.Device(args.device)
    model = GraphReferenceCNN(device, args.batch_size, learning_rate=LEARNING_RATE, momentum=MOMENTUM,
                              data_source=functools.partial(HostSGD, learning_rate=LEARNING_RATE, momentum=MOMENTUM) if args.style == "cpu" else None, style=args.style)
    images, labels = random_batch(args.batch_size)
    print(f"training the reference CNN through an NNGraph of {model.graph.number_of_filters} filters on "
          f"{device.name}, batch {args.batch_size}, training style {args.style}")
    train(model, images, labels, args.steps)


if __name__ == "__main__":
    main()
