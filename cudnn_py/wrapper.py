"""``import cudnn_py.wrapper`` / ``from cudnn_py.wrapper import Graph``: 1.32's ``cudnn.wrapper`` module, which is
:mod:`cudnn_py.facade.wrapper` itself (this module replaces itself with it in ``sys.modules``)."""
import sys

from .facade import wrapper as _wrapper

sys.modules[__name__] = _wrapper
