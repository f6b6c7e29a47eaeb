"""Where a model's weights come from: the one list that the model registry and the cell record both check.

"checkpoint": loaded with ``from_pretrained``; "dummy": seeded random weights built from the model's shipped
config (:mod:`batchperf.backends.dummy`), as vLLM's ``--load-format dummy``. It lives in ``measure`` because
``backends`` (which loads models) and ``results`` (which reads records) are sibling stages: neither may import
the other.
"""

from __future__ import annotations

# The first is the default: a record without model.weights predates dummy weights.
WEIGHTS = ("checkpoint", "dummy")
