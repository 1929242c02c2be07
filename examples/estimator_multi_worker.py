"""The seeds' "Multi-worker training with Estimator" program, on distrib.

TensorFlow original, in short (TensorFlow 2.15 was the last release with Estimator)::

    def input_fn(mode, input_context=None):
        datasets, info = tfds.load(name='mnist', with_info=True, as_supervised=True)
        mnist_dataset = (datasets['train'] if mode == tf.estimator.ModeKeys.TRAIN else
                         datasets['test'])
        def scale(image, label):
            image = tf.cast(image, tf.float32)
            image /= 255
            return image, label
        if input_context:
            mnist_dataset = mnist_dataset.shard(input_context.num_input_pipelines,
                                                input_context.input_pipeline_id)
        return mnist_dataset.map(scale).cache().shuffle(BUFFER_SIZE).batch(BATCH_SIZE)

    def model_fn(features, labels, mode):
        model = tf.keras.Sequential([
            tf.keras.layers.Conv2D(32, 3, activation='relu', input_shape=(28, 28, 1)),
            tf.keras.layers.MaxPooling2D(),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(64, activation='relu'),
            tf.keras.layers.Dense(10)])
        logits = model(features, training=False)
        if mode == tf.estimator.ModeKeys.PREDICT:
            predictions = {'logits': logits}
            return tf.estimator.EstimatorSpec(labels=labels, predictions=predictions)
        optimizer = tf.compat.v1.train.GradientDescentOptimizer(learning_rate=LEARNING_RATE)
        loss = tf.keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction=tf.keras.losses.Reduction.NONE)(labels, logits)
        loss = tf.reduce_sum(loss) * (1. / BATCH_SIZE)
        if mode == tf.estimator.ModeKeys.EVAL:
            return tf.estimator.EstimatorSpec(mode, loss=loss)
        return tf.estimator.EstimatorSpec(
            mode=mode, loss=loss,
            train_op=optimizer.minimize(loss, tf.compat.v1.train.get_or_create_global_step()))

    strategy = tf.distribute.experimental.MultiWorkerMirroredStrategy()
    config = tf.estimator.RunConfig(train_distribute=strategy)
    classifier = tf.estimator.Estimator(model_fn=model_fn, model_dir='/tmp/multiworker',
                                        config=config)
    tf.estimator.train_and_evaluate(classifier,
                                    train_spec=tf.estimator.TrainSpec(input_fn=input_fn),
                                    eval_spec=tf.estimator.EvalSpec(input_fn=input_fn))

The edits: Keras layers -> torch modules (channels first), the TF optimizer -> a torch
optimizer passed as ``train_op``, ``tf.*`` -> ``distrib.*``, MNIST -> the bundled digits
(already scaled to [0, 1]); the PREDICT spec gets its ``mode`` (the original forgot it),
and EVAL reports an accuracy metric besides the loss.
Run the workers, with an optional evaluator task, on this machine::

    distrib run --cluster worker=2 examples/estimator_multi_worker.py
    distrib run --cluster chief=1,worker=1,evaluator=1 examples/estimator_multi_worker.py \
        --start_delay_secs 5 --throttle_secs 5
"""

from __future__ import annotations

import argparse
import logging

import torch
from torch import nn

import distrib
from distrib.datasets import digits

BUFFER_SIZE = 10000
BATCH_SIZE = 64
LEARNING_RATE = 1e-4


def input_fn(mode, input_context=None):  # type: ignore[no-untyped-def]
    (x_train, y_train), (x_test, y_test) = digits.load_data(data_format="channels_first")
    images, labels = ((x_train, y_train) if mode == distrib.estimator.ModeKeys.TRAIN
                      else (x_test, y_test))
    mnist_dataset = distrib.data.Dataset.from_tensor_slices((images, labels))

    def scale(image, label):  # type: ignore[no-untyped-def]
        return image.float(), label

    if input_context:
        mnist_dataset = mnist_dataset.shard(input_context.num_input_pipelines,
                                            input_context.input_pipeline_id)
    return mnist_dataset.map(scale).cache().shuffle(BUFFER_SIZE).batch(BATCH_SIZE)


def model_fn(features, labels, mode):  # type: ignore[no-untyped-def]
    model = nn.Sequential(
        nn.Conv2d(1, 32, 3), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 13 * 13, 64), nn.ReLU(),
        nn.Linear(64, 10))
    logits = model(features)
    if mode == distrib.estimator.ModeKeys.PREDICT:
        predictions = {"logits": logits}
        return distrib.estimator.EstimatorSpec(mode, predictions=predictions)
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    loss = distrib.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction=distrib.losses.Reduction.NONE)(labels, logits)
    loss = loss.sum() * (1. / BATCH_SIZE)
    if mode == distrib.estimator.ModeKeys.EVAL:
        return distrib.estimator.EstimatorSpec(mode, loss=loss, eval_metric_ops={
            "accuracy": distrib.estimator.metrics.accuracy(labels, logits.argmax(1))})
    return distrib.estimator.EstimatorSpec(mode=mode, loss=loss, train_op=optimizer)


def main() -> None:
    global LEARNING_RATE
    ap = argparse.ArgumentParser()
    ap.add_argument("--model_dir", default="/tmp/multiworker")
    ap.add_argument("--learning_rate", type=float, default=LEARNING_RATE)
    ap.add_argument("--max_steps", type=int, default=None)
    ap.add_argument("--start_delay_secs", type=float, default=120)
    ap.add_argument("--throttle_secs", type=float, default=600)
    args = ap.parse_args()
    LEARNING_RATE = args.learning_rate
    logging.basicConfig(level=logging.INFO, format="%(levelname)s:%(name)s:%(message)s")
    torch.manual_seed(0)

    strategy = distrib.MultiWorkerMirroredStrategy()
    config = distrib.estimator.RunConfig(train_distribute=strategy)
    classifier = distrib.estimator.Estimator(model_fn=model_fn, model_dir=args.model_dir,
                                             config=config)
    result = distrib.estimator.train_and_evaluate(
        classifier,
        train_spec=distrib.estimator.TrainSpec(input_fn=input_fn, max_steps=args.max_steps),
        eval_spec=distrib.estimator.EvalSpec(input_fn=input_fn,
                                             start_delay_secs=args.start_delay_secs,
                                             throttle_secs=args.throttle_secs))
    if result is not None and strategy.extended.should_save_summary:
        metrics, _ = result
        print(f"task {config.task_type}:{config.task_id} workers={config.num_worker_replicas} "
              f"global_step={metrics['global_step']} accuracy={metrics['accuracy']:.4f} "
              f"loss={metrics['loss']:.4f}")


if __name__ == "__main__":
    main()
