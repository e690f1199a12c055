"""hardware.device: the one home of device names and out-of-memory recovery (re-exported by retrievers.encoder)."""

import pytest

import hardware.device as device
import retrievers.encoder as encoder


@pytest.mark.parametrize("name", ["is_out_of_memory", "release_accelerator_memory", "resolve_device", "run_in_batches",
                                  "warn_out_of_memory"])
def test_encoder_names_are_the_hardware_helpers(name):
    assert getattr(encoder, name) is getattr(device, name)


@pytest.mark.parametrize("name,ok", [("auto", True), ("cpu", True), ("cuda", True), ("cuda:0", True), ("cuda:12", True),
                                     ("mps", False), ("cuda:", False), ("cuda:x", False), ("gpu0", False), ("tpu", False)])
def test_device_names(name, ok):
    assert device.is_device_name(name) is ok


def test_auto_device_is_resolve_auto():
    assert device.auto_device() == device.resolve_device("auto") in ("cpu", "cuda")
    assert device.resolve_device("mps") == "mps"  # accepted by name, as before
