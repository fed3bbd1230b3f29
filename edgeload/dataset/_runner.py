"""What a DataLoader keeps between epochs: its executor, its slots and its live epoch.

One epoch is live at a time, held weakly (``del`` of an unfinished iterator stops its
workers at once, as torch's does).  Workers are stopped before slots are freed, so no
worker can still be writing a slot that is handed out again.
"""

from __future__ import annotations

import weakref
from typing import Any

from ._epoch import EpochIterator, LoaderSlots, make_loader_executor
from ._sampling import EpochOrder
from ._settings import LoaderChoice, LoaderSettings
from ._state import EpochProgress, LoaderState, begin_epoch


class EpochRunner:
    """Starts a loader's epochs on workers and slots made for its current plan."""

    def __init__(self, state: LoaderState) -> None:
        self._state = state
        self._executor: Any = None
        self.slots = LoaderSlots(
            enabled=False, in_flight=0, budget_bytes=None, shared=False, mode="host"
        )
        self._live: weakref.ref[EpochIterator] | None = None
        self._persistent = False
        self.start_method = self.start_method_reason = ""

    @property
    def live(self) -> EpochIterator | None:
        """The iterator of the epoch in progress (None between epochs)."""
        return None if self._live is None else self._live()

    @live.setter
    def live(self, it: EpochIterator | None) -> None:
        self._live = None if it is None else weakref.ref(it)

    def replan(self, choice: LoaderChoice, *, slots_enabled: bool, engine: Any) -> None:
        """Stop the workers and free the slots of the previous plan; make slots for this one."""
        from ._worker import install_seed_hooks, install_torch_hook

        self.close()
        if choice.worker_kind == "thread":
            install_torch_hook()
            install_seed_hooks()
        self.slots = LoaderSlots(
            enabled=slots_enabled,
            in_flight=choice.in_flight,
            budget_bytes=choice.prefetch_bytes,
            shared=choice.worker_kind == "process",
            mode=choice.memory_mode,
            engine=engine,
        )

    def start(
        self, settings: LoaderSettings, *, length: Any, len_called: int | None
    ) -> EpochIterator:
        """Begin an epoch, or resume the loaded one (the caller ended the live one)."""
        order = EpochOrder(settings.sampling, settings.generator)
        keep = self._persistent and self._executor is not None
        shared, progress = begin_epoch(self._state, order, settings, keep_seed=keep)
        self._persistent = settings.persistent
        if self._executor is None or not settings.persistent:
            self._close_executor()
            self._executor = make_loader_executor(settings)
            self.start_method = getattr(self._executor, "start_method", "")
            self.start_method_reason = getattr(self._executor, "start_method_reason", "")
        epoch = EpochProgress(max(1, settings.num_workers))
        if progress is not None:
            epoch.load(progress)
        base_seed = int(self._state.base_seed or 0)
        starts = epoch.worker_starts(base_seed, shared, settings.sampling.iterable)
        for w, start in enumerate(starts):
            self._executor.start_worker(w, start)
        it = EpochIterator(
            settings,
            self._state,
            executor=self._executor,
            slots=self.slots,
            order=order,
            progress=epoch,
            length=length,
            len_called=len_called,
            on_end=self._ended,
        )
        self.live = it
        return it

    def live_state(self) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """The live epoch's order state and progress (None between epochs)."""
        it = self.live
        return None if it is None or it.done else (it.order_state(), it.progress.state())

    def stats(self, choice: LoaderChoice) -> dict[str, Any]:
        """``DataLoader.stats()``: the counters, the plan's choice, the slots."""
        return {
            **self._state.counters,
            "skipped": list(self._state.skips),
            "num_workers": choice.num_workers,
            "worker_kind": choice.worker_kind,
            "memory_mode": choice.memory_mode,
            "memory_mode_reason": choice.memory_mode_reason,
            "start_method": self.start_method,
            "start_method_reason": self.start_method_reason,
            **self.slots.stats(),
        }

    def _ended(self, it: EpochIterator, finished: bool) -> None:
        if finished:
            if it is self.live:
                self._state.finish_epoch()
                self.live = None
            if not self._persistent:
                self._close_executor()
        elif self.live in (it, None):
            # An unfinished iterator was deleted: stop its workers now, as torch does.
            self._close_executor()

    def abandon(self) -> None:
        """End the live epoch, if any: stop its workers, then release its slots."""
        live = self.live
        if live is not None and not live.done:
            self._close_executor()
        if live is not None:
            live.close()
            self.live = None

    def _close_executor(self) -> None:
        if self._executor is not None:
            self._executor.close()
            self._executor = None

    def close(self) -> None:
        """Stop the workers and free the slots (batches the user holds stay valid)."""
        self.abandon()
        self._close_executor()
        self.slots.close()
