"""The Hugging Face ``transformers.Trainer`` side of :class:`~.monitor.LeadingTermMonitor`.

``transformers`` is imported only when a Trainer callback is asked for.
"""

from typing import Any

__all__ = ["trainer_callback"]


def trainer_callback(monitor: Any) -> Any:
    """A ``TrainerCallback`` that calls ``monitor(model, global_step)`` after each step.

    The scores go into ``monitor.history`` and, as one entry per scored step (``{"step": s,
    "cos_W_O": ..., ...}``), into the Trainer's ``state.log_history``; each flag is logged
    through the ``transformers`` logger as a warning. The loss beside step ``s``'s scores is
    the one the Trainer logs at step ``s`` (it logs after the step's callbacks; the mean over
    its last ``logging_steps`` steps), NaN where it logs none at ``s``.
    """
    from transformers import TrainerCallback
    from transformers.utils import logging

    logger = logging.get_logger("transformers.trainer")

    class LeadingTermCallback(TrainerCallback):
        """Scores the Trainer's model every ``monitor.every`` optimiser steps."""

        def on_step_end(self, args, state, control, model=None, **kwargs):
            step = state.global_step
            if model is None:
                return control
            flagged = len(monitor.flags)
            scores = monitor(model, step)
            if scores is not None:
                state.log_history.append({**scores, "step": step})
            for flag in monitor.flags[flagged:]:
                logger.warning(
                    f"leading-term monitor: {flag['score']} = {flag['value']:.4f} fell below "
                    f"{flag['threshold']} at step {step} (theorem's step bound "
                    f"{flag['step_bound']:.3g})"
                )
            return control

        def on_log(self, args, state, control, logs=None, **kwargs):
            steps = monitor.history.steps
            if "loss" in (logs or {}) and steps and steps[-1] == state.global_step:
                monitor.history.loss[-1] = float(logs["loss"])
            return control

    return LeadingTermCallback()
