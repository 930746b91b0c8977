"""How a GPU test reports a graph that was refused: as a skip or an xfail carrying the refusal's words and the
running cuDNN (and GPU), never as a pass. A test whose feature cuDNN (or cudnn_py's gate for it) turned down on
this machine checked nothing of the feature; the report must say so. tests/test_refusal_reports.py scans the
GPU test modules for the old pattern (a refusal caught and the test returning).

* :func:`skip_refused`: the feature is not for this machine by design (a GPU generation, a cuDNN version the
  feature needs: the official frontend's own gates);
* :func:`xfail_refused`: this cuDNN has no engine for the graph here, or a known cuDNN bug (an erratum) refuses it;
* :func:`expect_refusal`: assert that ``call()`` is refused with the expected message (a wrong refusal, or none,
  still fails the test), then report it with one of the two.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

import pytest

import cudnn_py as cudnn
from cudnn_py.errors import version_string


def where() -> str:
    """The running cuDNN, and the GPU's compute capability where one is visible."""
    text = f"cuDNN {version_string(cudnn.backend_version())}"
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            text += f", compute capability {major}.{minor}"
    except Exception:  # no torch, no device: the version alone
        pass
    return text


def reason(what: str, e: BaseException) -> str:
    """``what`` was refused, where, and the refusal's own words (which must say something)."""
    words = " ".join(str(e).split())
    assert words, f"a refusal must say why ({type(e).__name__} with no message)"
    return f"{what}: refused on {where()}: {type(e).__name__}: {words[:800]}"


def skip_refused(what: str, e: BaseException) -> NoReturn:
    pytest.skip(reason(what, e))


def xfail_refused(what: str, e: BaseException) -> NoReturn:
    pytest.xfail(reason(what, e))


def expect_refusal(call: Callable[[], Any], match: str, what: str, *,
                   error: type[BaseException] = cudnn.cudnnGraphNotSupportedError,
                   report: Callable[[str, BaseException], NoReturn] = skip_refused) -> NoReturn:
    """``call()`` must raise ``error`` with a message matching ``match``; the test is then reported by ``report``
    (skipped, or xfailed) with the refusal's words."""
    with pytest.raises(error, match=match) as info:
        call()
    report(what, info.value)
