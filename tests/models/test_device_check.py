"""models.device_check: one onnxruntime distribution with CUDA, or a loud start-up error.

Only the installed-metadata view (package -> distributions) is a stand-in here; the
providers always come from the real onnxruntime of this (CPU) machine.
"""

from __future__ import annotations

import subprocess
import sys

import onnxruntime as ort
import pytest

from models.device_check import (
    OrtInstall,
    onnxruntime_distributions,
    ort_install,
    require_device,
    verify_gpu_install,
)
from models.encoder import CPU_EP, CUDA_EP, DeviceUnavailableError

BOTH = {"onnxruntime": ["onnxruntime", "onnxruntime-gpu"], "numpy": ["numpy"]}
GPU_ONLY = {"onnxruntime": ["onnxruntime-gpu"]}


def test_this_machine_has_one_cpu_distribution_from_the_real_metadata() -> None:
    install = ort_install()
    assert install.distributions == ("onnxruntime",)
    assert CPU_EP in install.providers and CUDA_EP not in install.providers


def test_two_distributions_are_reported_by_name() -> None:
    assert onnxruntime_distributions(BOTH) == ("onnxruntime", "onnxruntime-gpu")
    with pytest.raises(DeviceUnavailableError) as err:
        verify_gpu_install(BOTH)
    message = str(err.value)
    assert "2 distributions provide the onnxruntime package" in message
    assert "onnxruntime, onnxruntime-gpu" in message and "make gpu-install" in message


def test_the_missing_cuda_provider_is_reported_even_with_one_gpu_distribution() -> None:
    """The metadata says onnxruntime-gpu, the real onnxruntime here has no CUDA EP."""
    with pytest.raises(DeviceUnavailableError) as err:
        verify_gpu_install(GPU_ONLY)
    assert "2 distributions" not in str(err.value)
    assert f"no {CUDA_EP}" in str(err.value)
    assert ", ".join(ort.get_available_providers()) in str(err.value)


def test_a_sound_gpu_install_has_no_problems() -> None:
    sound = OrtInstall(("onnxruntime-gpu",), (CUDA_EP, CPU_EP))
    assert sound.problems() == []
    assert len(OrtInstall((), (CPU_EP,)).problems()) == 2  # none installed, no CUDA


@pytest.mark.parametrize("backend", ["onnx", "torch"])
def test_cuda_fails_at_start_and_auto_or_cpu_pass(backend: str) -> None:
    with pytest.raises(DeviceUnavailableError):
        require_device("cuda", backend)
    require_device("auto", backend)  # today's behaviour: CUDA when it can, else CPU
    require_device("cpu", backend)
    with pytest.raises(ValueError, match="onnx or torch"):
        require_device("cuda", "tensorrt")


def test_gpu_verify_cli_exits_1_with_the_reason() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "models", "gpu-verify"], capture_output=True, text=True
    )
    assert done.returncode == 1
    assert f"no {CUDA_EP}" in done.stderr and "make gpu-install" in done.stderr
