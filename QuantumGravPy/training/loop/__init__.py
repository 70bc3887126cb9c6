"""The one epoch loop: :class:`~.trainer.Trainer` and its hooks, :class:`~.trainer_ddp.TrainerDDP`
(the same loop in every DDP process, rank-0 decisions broadcast), the training pass
(:mod:`.step`), what the model is built from (:mod:`.spec`), the optimizer and its schedule
(:mod:`.optim`, :mod:`.schedule`), compiling (:mod:`.compiling`), devices and precision
(:mod:`.devices`), and what the run says as it starts (:mod:`.notices`).

Above :mod:`..state`, below :mod:`..launching`.
"""
