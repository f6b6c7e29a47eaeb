"""One upgrade A/B: two environments run the same cells alternately in fresh processes (:mod:`.run`, the loop;
:mod:`.pairs`, one pair; :mod:`.judging`, a cell's verdict; :mod:`.cell`, a cell's series over the pairs;
:mod:`.result`, what the run holds and writes), how a pair's two processes share the machine (:mod:`.designs`), the
statistics of the paired ratios (:mod:`.stats`: the sequential test, signed-rank or t), the sides as processes see
them (:mod:`.env`: probe, collect) and its report (:mod:`.report`).

What runs many A/Bs (release chains, bisection) is :mod:`batchperf.releases`; what builds the environments
compared (the lock, ``env make``) is :mod:`batchperf.envs`."""
