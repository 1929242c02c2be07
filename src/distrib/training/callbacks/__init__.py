"""Keras callbacks for ``distrib.Model.fit``, ``evaluate`` and ``predict``.

The names, arguments, defaults and messages are those of ``tf.keras.callbacks``.
Every replica runs the callbacks with the same global logs, so decisions (early
stopping, learning-rate changes) agree; output and files come from the chief only.

Example::

    import distrib
    model.fit(train, epochs=20, validation_data=test, callbacks=[
        distrib.callbacks.EarlyStopping(patience=3, restore_best_weights=True),
        distrib.callbacks.ModelCheckpoint("ckpt/best.pt", save_best_only=True,
                                          save_weights_only=True),
        distrib.callbacks.TensorBoard("logs"),
    ])
"""

from distrib.training.callbacks.backup_and_restore import BackupAndRestore
from distrib.training.callbacks.base import Callback, CallbackList
from distrib.training.callbacks.csv_logger import CSVLogger
from distrib.training.callbacks.early_stopping import EarlyStopping
from distrib.training.callbacks.history import History
from distrib.training.callbacks.lambda_callback import LambdaCallback
from distrib.training.callbacks.learning_rate_scheduler import LearningRateScheduler
from distrib.training.callbacks.model_checkpoint import ModelCheckpoint
from distrib.training.callbacks.progbar_logger import ProgbarLogger
from distrib.training.callbacks.reduce_lr_on_plateau import ReduceLROnPlateau
from distrib.training.callbacks.tensorboard import TensorBoard
from distrib.training.callbacks.terminate_on_nan import TerminateOnNaN

__all__ = [
    "BackupAndRestore", "Callback", "CallbackList", "CSVLogger", "EarlyStopping", "History", "LambdaCallback",
    "LearningRateScheduler", "ModelCheckpoint", "ProgbarLogger", "ReduceLROnPlateau",
    "TensorBoard", "TerminateOnNaN",
]
