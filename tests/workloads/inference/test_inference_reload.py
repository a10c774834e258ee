"""Reload within one model's device memory (app.Generate.reconfigure, loading.swap): the new
weights are read and verified on the host while the old model serves, and the old model leaves
the device before the new one reaches it. The device here is an accountant on the CPU that
records what the replica places on it and frees there (loading.Device is the replica's only way
on and off the device)."""

from __future__ import annotations

import asyncio
import threading
from typing import ClassVar

import pytest

from workloads.inference import engine, loading

RUN = "tiny-run"


class Accountant(loading.Device):
    """The CPU, counting the bytes of the models placed on it, in the order things happened."""

    instances: ClassVar[list[Accountant]] = []

    def __init__(self, name: str | None = None):
        super().__init__("cpu")
        self.resident = 0
        self.peak = 0
        self.events: list[str] = []
        self.lock = threading.Lock()
        Accountant.instances.append(self)

    def place(self, model):
        with self.lock:
            self.resident += loading.weight_bytes(model)
            self.peak = max(self.peak, self.resident)
            self.events.append("place")
        return super().place(model)

    def free(self, model):
        with self.lock:
            self.resident -= loading.weight_bytes(model)
            self.events.append("free")
        super().free(model)


@pytest.fixture
def accountant(monkeypatch):
    Accountant.instances.clear()
    monkeypatch.setattr(loading, "Device", Accountant)
    return Accountant.instances


def _batch(gen, prompt: str, n: int):
    """One batch of one greedy request, as Serve's batch loop runs it (``@serve.batch`` itself
    needs a Serve replica)."""
    from workloads.common.model import encode
    from workloads.inference.app import Generate

    return Generate._generate.__wrapped__(gen, [[engine.GenRequest(encode(prompt), n, 0.0)]])


def _greedy(model, prompt: str, n: int) -> list[int]:
    from workloads.common.model import encode

    return engine.generate_batch(model, [engine.GenRequest(encode(prompt), n, 0.0)])[0]


def test_reload_frees_the_old_model_before_the_new_one_reaches_the_device(
    tmp_path, make_checkpoint, accountant, monkeypatch
):
    """A reload while a batch generates: the batch ends on the old model, then the old model
    is freed and the new one placed; the device never holds more than one model."""
    from workloads.inference.app import Generate

    make_checkpoint(tmp_path, 10, seed=1)
    old_model = loading.load_model(str(tmp_path), RUN).model
    make_checkpoint(tmp_path, 20, seed=2)
    new_model = loading.load_model(str(tmp_path), RUN).model
    (tmp_path / RUN / "checkpoint_000000020").rename(tmp_path / "later")  # not there at start

    async def go():
        gen = Generate(str(tmp_path), RUN)
        (device,) = accountant
        one_model = loading.weight_bytes(gen.loaded.model)
        assert device.events == ["place"] and gen.loaded.step == 10
        (tmp_path / "later").rename(tmp_path / RUN / "checkpoint_000000020")
        release = threading.Event()
        real = engine.generate_batch

        def slow_batch(model, requests):  # a batch that runs until the test lets it end
            release.wait(30)
            return real(model, requests)

        monkeypatch.setattr(engine, "generate_batch", slow_batch)
        running = asyncio.create_task(_batch(gen, "during", 6))
        while not gen._running:
            await asyncio.sleep(0.01)
        reload = asyncio.create_task(gen.reconfigure({"reload": "step-20"}))
        await asyncio.sleep(0.5)  # the new model is read; the swap waits for the batch
        assert device.events == ["place"] and gen.loaded.step == 10 and not reload.done()
        release.set()
        ((model_id, out),) = await asyncio.wait_for(running, 30)
        await asyncio.wait_for(reload, 30)
        monkeypatch.setattr(engine, "generate_batch", real)
        assert (model_id, out[0]) == (f"{RUN}@step-10", _greedy(old_model, "during", 6))
        assert device.events == ["place", "free", "place"]
        assert device.peak == one_model and device.resident == one_model
        assert gen.loaded.step == 20 and gen.last_swap_pause_s is not None
        ((model_id, out),) = await _batch(gen, "after", 6)
        assert (model_id, out[0]) == (f"{RUN}@step-20", _greedy(new_model, "after", 6))

    asyncio.run(go())


def test_work_that_arrives_during_the_swap_runs_on_the_new_model(tmp_path, make_checkpoint, accountant, monkeypatch):
    """Requests, health checks and prompt log-probabilities that arrive while the swap holds
    the gate wait for it and run on the new model (never on a freed one)."""
    from workloads.inference.app import Generate

    make_checkpoint(tmp_path, 10, seed=1)

    async def go():
        gen = Generate(str(tmp_path), RUN)
        make_checkpoint(tmp_path, 20, seed=2)
        entered, release = threading.Event(), threading.Event()
        real_swap = loading.swap

        def held_swap(device, old, fresh):
            entered.set()
            release.wait(30)
            return real_swap(device, old, fresh)

        monkeypatch.setattr(loading, "swap", held_swap)
        reload = asyncio.create_task(gen.reconfigure({"reload": "step-20"}))
        while not entered.is_set():
            await asyncio.sleep(0.01)
        waiting = [asyncio.create_task(_batch(gen, "x", 3)), asyncio.create_task(gen.check_health())]
        await asyncio.sleep(0.2)
        assert not any(t.done() for t in waiting)
        release.set()
        await asyncio.wait_for(reload, 30)
        ((model_id, _),), _ = await asyncio.wait_for(asyncio.gather(*waiting), 30)
        assert model_id == f"{RUN}@step-20"

    asyncio.run(go())
