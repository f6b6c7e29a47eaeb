"""The upgrade A/B: two environments run the same cells alternately in fresh processes (:mod:`.run`, the loop;
:mod:`.pairs`, one pair; :mod:`.judging`, a cell's verdict; :mod:`.result`, what the run holds and writes), how a
pair's two processes share the machine (:mod:`.designs`), the statistics of the paired ratios (:mod:`.stats`), its
report (:mod:`.report`), bisection over an ordered list of environments (:mod:`.bisect`), and the environments
themselves (:mod:`.env`: probe, collect; :mod:`.venv`: ``batchperf env make``; :mod:`.lock`: requirements.lock).

Nothing is imported here: ``python -m batchperf.ab.lock`` runs with the system interpreter, before any environment
exists."""
