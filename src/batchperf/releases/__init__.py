"""What runs many A/Bs: a release chain (:mod:`.chain`: each adjacent pair and first → last judged by ``ab``,
resumable; :mod:`.chain_report`: its markdown and the levels its plot draws) and bisection over an ordered list
of environments (:mod:`.bisect`). One A/B is :mod:`batchperf.ab`; the environments it compares are
:mod:`batchperf.envs`."""
