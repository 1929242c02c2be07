"""``ModeKeys``: the three modes ``model_fn`` is called in (``tf.estimator.ModeKeys``).

Example:
    >>> ModeKeys.TRAIN, ModeKeys.EVAL, ModeKeys.PREDICT
    ('train', 'eval', 'infer')
"""

from __future__ import annotations

from typing import Any

from distrib.errors import UsageError, explain

__all__ = ["ModeKeys", "check_mode"]


class ModeKeys:
    """The modes of an Estimator, with TensorFlow's string values.

    Example::

        def model_fn(features, labels, mode):
            if mode == distrib.estimator.ModeKeys.PREDICT:
                ...
    """

    TRAIN = "train"
    EVAL = "eval"
    PREDICT = "infer"


_MODES = (ModeKeys.TRAIN, ModeKeys.EVAL, ModeKeys.PREDICT)


def check_mode(mode: Any) -> str:
    """``mode`` if it is one of the :class:`ModeKeys`, else a :class:`UsageError`.

    Example:
        >>> check_mode("eval")
        'eval'
    """
    if mode not in _MODES:
        raise UsageError(explain("mode", mode, f"mode={mode} is not one of "
                                 f"{list(_MODES)}", "pass distrib.estimator.ModeKeys.TRAIN, "
                                 "EVAL or PREDICT"))
    return str(mode)
