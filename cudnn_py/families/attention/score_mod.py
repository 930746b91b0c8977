"""``score_mod`` callbacks of attention (a callable ``(graph, score) -> tensor``, as in the classic API): the graph the
callback builds on is a :class:`ScoreGraph`, which offers the classic pointwise methods only and emits their
nodes into the attention's decomposition, between the scale and the bias.

``sdpa_backward`` runs ``score_mod`` at the same place of its recomputed scores and
``score_mod_bprop`` on dS, after dBias is taken and before the attn-scale multiply: the bprop maps
the gradient of the modified scores to that of the scores the callback received. Both run on one program, so a
bprop may use tensors its score_mod built (the softcap's pre-tanh value, say)."""
from __future__ import annotations

from typing import Any

from ...errors import InvalidTypeError, InvalidValueError
from ...ir.spec import SPECS
from ...ir.tensor import Tensor


class ScoreGraph:
    """The ``graph`` a score_mod callback receives: ``graph.tanh(score)``, ``graph.mul(score, 0.5)``, ...

    Tensors of the user's graph (a softcap scalar, say) may be used: they join the program under their uid."""

    def __init__(self, rw: Any, where: str) -> None:
        self._rw = rw
        self._where = where

    def __getattr__(self, method: str) -> Any:
        spec = SPECS.get(method)
        if spec is None or spec.kind != "pointwise" or not spec.public:
            raise AttributeError(f"{self._where}: score_mod may build pointwise ops only; {method!r} is not one")

        def build(*args: Any, **kwargs: Any) -> Any:
            return getattr(self._rw, method)(*[self._own(a) for a in args],
                                             **{k: self._own(v) for k, v in kwargs.items()})
        return build

    def _own(self, value: Any) -> Any:
        """A user-graph tensor becomes its program twin."""
        return self._rw.program.own(value) if isinstance(value, Tensor) else value


def apply(score_mod: Any, rw: Any, node_name: str, s: Tensor, method: str = "sdpa",
          callback: str = "score_mod") -> Tensor:
    where = f"{method} node {node_name!r}"
    out = score_mod(ScoreGraph(rw, where), s)
    if not isinstance(out, Tensor):
        raise InvalidTypeError(f"{where}: {callback} must return the modified score tensor, got {type(out).__name__}")
    if [int(d) for d in out.dim] != [int(d) for d in s.dim]:
        raise InvalidValueError(f"{where}: {callback} returned dims {list(out.dim)}, not the scores' {list(s.dim)}")
    return out
