"""torchvision's ResNet-18 (10 classes, 32x32 images) brought with
mpsx.from_torch and trained as its training NNGraph: the model a PyTorch
user hands over, which python -m mpsx.bench trains beside PyTorch's own
training of the same module (reference_cnn.TorchTraining)."""

import mpsx
from mpsx.benchmarks.reference_cnn import CLASSES, TrainingSteps


def resnet18():
    """torchvision.models.resnet18(weights=None) with CLASSES outputs, or None where torchvision is missing."""
    try:
        from torchvision.models import resnet18 as make  # type: ignore[import-not-found]  # optional
    except ImportError:
        return None
    return make(weights=None, num_classes=CLASSES)


class ImportedTraining(TrainingSteps):
    """A module of N x 3 x 32 x 32 images and CLASSES outputs, imported, and
    trained as a training NNGraph: softmax cross-entropy, mean over the batch,
    SGD with momentum on every trainable value; `accumulator_precision` on
    every convolution and fully connected layer, `image_format` the graph's
    and the images' format."""

    def __init__(self, device, module, batch_size, learning_rate=0.001, momentum=0.9,
                 accumulator_precision=mpsx.NNConvolutionAccumulatorPrecisionOption.FLOAT,
                 image_format=mpsx.DataType.FLOAT32):
        import torch
        self.device, self.batch_size, self.image_format = device, batch_size, image_format
        self.imported = mpsx.from_torch(module, torch.zeros(batch_size, 3, 32, 32), device)
        loss = mpsx.CNNLossDescriptor(mpsx.CNNLossType.SOFTMAX_CROSS_ENTROPY, mpsx.CNNReductionType.MEAN,
                                      reduce_across_batch=True)
        sgd = mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=learning_rate, momentum_scale=momentum)
        self.graph = self.imported.training_graph(loss, sgd, format=image_format,
                                                  accumulator_precision=accumulator_precision)
        self._inputs()

    def encode_step(self, cb, images, labels):
        self.graph.encode_batch(cb, [images], [labels])
