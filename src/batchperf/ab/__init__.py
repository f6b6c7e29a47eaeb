"""The upgrade A/B: two environments run the same cells alternately in fresh processes (:mod:`.run`), the
statistics of the paired ratios (:mod:`.stats`), its report (:mod:`.report`), bisection over an ordered list of
environments (:mod:`.bisect`), and the environments themselves (:mod:`.env`: probe, collect, run; :mod:`.venv`:
``batchperf env make``)."""
