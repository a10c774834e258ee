"""The GPU machine runs bench/serving_model.py's swap without Ray: its steps are checked here on a CPU."""

import torch

from bench import serving_model


def test_the_swap_measurement_serves_the_newer_checkpoint(tmp_path):
    config = serving_model.llama(2, 64, 64)
    serving_model.save_job_checkpoint(tmp_path, config, step=1)
    got = serving_model.measure_swap(tmp_path, config, "cpu", torch.float32)
    assert got["served_step"] == 2
    assert got["model_bytes"] > 0 and got["swap_s"] >= 0
    assert got["gpu_peak_over_model"] is None  # only a GPU reports a device peak
